"""The shell commands that README.md, eval/README.md, studies/README.md and docs/*.md show users, parsed once for every docs test.

A command is one step of a ```bash block line (backslash continuations joined, `# comments` dropped, `&&` chains
and a trailing `&` split into steps), or an inline `code` span that starts an entry point (`python ...`,
`accelerate launch ...`). Environment assignments in front (`OMP_NUM_THREADS=1 python ...`) are kept apart.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV_WORD = re.compile(r"[A-Z_][A-Z0-9_]*=\S*")
# inline spans that are commands (prose also quotes flags and paths; those are not commands)
INLINE_ENTRY = re.compile(r"^([A-Z_]+=\S+ )*(python |accelerate launch |torchrun |bash |trl |pip install )")


@dataclass(frozen=True)
class Command:
    doc: str  # path relative to the repo
    env: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]
    inline: bool = False

    @property
    def text(self) -> str:
        return " ".join([f"{k}={v}" for k, v in self.env] + [shlex.quote(a) for a in self.argv])

    def __str__(self) -> str:
        return f"{self.doc}: {self.text}"


def doc_files() -> list[str]:
    docs = ["README.md", "eval/README.md", "studies/README.md"] + sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))
    return [d for d in docs if (REPO / d).is_file()]


def _steps(line: str, doc: str, inline: bool) -> list[Command]:
    words = shlex.split(line, comments=True)
    out, current = [], []
    for word in words + ["&&"]:
        if word in ("&&", "&", ";"):
            if current:
                env = []
                while current and ENV_WORD.fullmatch(current[0]):
                    key, value = current.pop(0).split("=", 1)
                    env.append((key, value))
                if current:
                    out.append(Command(doc, tuple(env), tuple(current), inline))
            current = []
        else:
            current.append(word)
    return out


def commands_in(doc: str) -> list[Command]:
    """The commands of one file, in reading order."""
    text = (REPO / doc).read_text()
    out = []
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip():
                out += _steps(line, doc, inline=False)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for span in re.findall(r"`([^`\n]+)`", prose):
        if INLINE_ENTRY.match(span):
            out += _steps(span, doc, inline=True)
    return out


def documented_commands() -> list[Command]:
    return [c for doc in doc_files() for c in commands_in(doc)]
