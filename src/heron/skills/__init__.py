"""Agent Skills: folders of instructions, scripts and references an agent loads when a task
calls for them (the open Agent Skills layout, `SKILL.md` with YAML front matter).

Progressive disclosure: the system prompt lists each skill's name and description under a
token budget (`SkillCatalogue.prompt_section`); `load_skill` returns a skill's instructions;
`read_skill_file` the files they point to; scripts run through the agent's usual tools.
Project skills are gated by trust like MCP servers (`SkillTrust`, pins of every file);
`allowed-tools` narrows what may run for the rest of the turn that loaded the skill
(`SkillGuard`). Loading is lenient and checking strict (`check_skills`, `heron skills check`).
docs/skills.md describes the whole.
"""

from heron.skills.allowed import Narrowing, parse_rule, unknown_entries
from heron.skills.catalogue import SKILL_CATALOGUE_TOKENS, SkillCatalogue, SkillSection
from heron.skills.finder import (
    ENTRY_POINT_GROUP,
    PROJECT_DIRS,
    SkillRoot,
    SkillScan,
    find_skills,
    skill_roots,
    user_skills_dir,
)
from heron.skills.loading import SkillSet, check_skills, load_skills, scan_skills
from heron.skills.skill import Problem, Skill, SkillSource, parse_skill
from heron.skills.tools import (
    LOAD_SKILL,
    READ_SKILL_FILE,
    LoadSkillTool,
    ReadSkillFileTool,
    SkillGuard,
    skill_tools,
)
from heron.skills.trust import SkillTrust, TrustVerdict

__all__ = [
    "ENTRY_POINT_GROUP",
    "LOAD_SKILL",
    "PROJECT_DIRS",
    "READ_SKILL_FILE",
    "SKILL_CATALOGUE_TOKENS",
    "LoadSkillTool",
    "Narrowing",
    "Problem",
    "ReadSkillFileTool",
    "Skill",
    "SkillCatalogue",
    "SkillGuard",
    "SkillRoot",
    "SkillScan",
    "SkillSection",
    "SkillSet",
    "SkillSource",
    "SkillTrust",
    "TrustVerdict",
    "check_skills",
    "find_skills",
    "load_skills",
    "parse_rule",
    "parse_skill",
    "scan_skills",
    "skill_roots",
    "skill_tools",
    "unknown_entries",
    "user_skills_dir",
]
