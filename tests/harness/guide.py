"""The user guide's local session, read from docs/user-guide.md so that the docs cannot drift.

The session is the `sh` block of the "Try it locally" section: a line is a command (a
trailing `  # ...` is a remark), the `# ...` lines right under it are the output it shows,
and a `# ...` line after a blank line is a remark.
`matches` compares a shown output with a real one the way a reader would: every shown line
appears in the real output (its words in order; other columns may sit between them), with
ages, member IDs, loopback addresses and volume names as placeholders, and the ROLE column
compared as a whole (which member leads first is Raft's choice, not the guide's).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"
SECTION = "## Try it locally"
ROLES = ("leader", "follower", "learner")
# etcdctl prints member IDs with %x: a leading zero is dropped, so an ID may be shorter than 16.
MEMBER_ID = re.compile(r"\b[0-9a-f]{10,16}\b")

AGE = re.compile(r"^(\d+[smhd])+$")
_PLACEHOLDERS = (  # in this order: a uid's last group would pass for a member ID
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uid>"),
    (MEMBER_ID, "<id>"),
    (re.compile(r"127\.\d+\.\d+\.\d+"), "<ip>"),
)


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)


def session(text: str | None = None) -> list[Step]:
    """The commands of the section's sh block, each with the output lines shown under it."""
    text = GUIDE.read_text() if text is None else text
    section = text[text.index(SECTION):]
    block = section[section.index("```sh\n") + len("```sh\n"):]
    block = block[:block.index("```")]
    steps: list[Step] = []
    output = False  # the lines right under a command are its output; a blank line ends it
    for line in block.splitlines():
        if not line.strip():
            output = False
        elif line.startswith("#"):
            if output and line.startswith("# "):
                steps[-1].shown.append(line[2:])
        else:
            steps.append(Step(line.split("  #", 1)[0].strip()))
            output = True
    return steps


def words(line: str) -> list[str]:
    out = []
    for word in line.replace("|", " ").split():
        if AGE.match(word):
            word = "<age>"
        for pattern, placeholder in _PLACEHOLDERS:
            word = pattern.sub(placeholder, word)
        if word != "...":
            out.append(word)
    return out


def _split_role(ws: list[str]) -> tuple[list[str], str | None]:
    if ws and ws[-1] in ROLES:
        return ws[:-1], ws[-1]
    return ws, None


def _subsequence(wanted: list[str], have: list[str]) -> bool:
    it = iter(have)
    return all(any(w == h for h in it) for w in wanted)


def matches(shown: list[str], real: str) -> bool:
    """Every shown line is in the real output (distinct lines, words in order), and the
    roles shown are the roles the real output has."""
    real_lines = [_split_role(words(line)) for line in real.splitlines() if line.strip()]
    shown_lines = [_split_role(words(line)) for line in shown]
    used: set[int] = set()
    for wanted, _ in shown_lines:
        found = next((i for i, (have, _) in enumerate(real_lines) if i not in used and _subsequence(wanted, have)), None)
        if found is None:
            return False
        used.add(found)
    shown_roles = Counter(role for _, role in shown_lines if role)
    return not shown_roles or shown_roles == Counter(role for _, role in real_lines if role)


def member_ids_shown(steps: list[Step]) -> dict[str, str]:
    """The guide's own member IDs, by the member name shown on the same line."""
    ids = {}
    for step in steps:
        for line in step.shown:
            found, names = MEMBER_ID.search(line), re.findall(r"\b[a-z]+-\d+\b", line)
            if found and names:
                ids[found.group(0)] = names[0]
    return ids
