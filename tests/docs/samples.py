#!/usr/bin/env python3
"""Every Rust and C sample in the README and the guides is code the tests build and run.

- README.md: its ```rust block must be engine/examples/readme_taste.rs (without the file's //!
  header) and its ```c block examples/minimal.c, character for character.
- docs/*.md: each ```rust and ```c block must stand, line for line (indentation aside), in one
  of the programs `make example` builds and runs: engine/examples/*.rs, examples/*.c.
- No code block anywhere without a language (```text for output).

`make example` runs the programs, then this.

    python3 tests/docs/samples.py
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_SAMPLES = {"rust": ROOT / "engine" / "examples" / "readme_taste.rs", "c": ROOT / "examples" / "minimal.c"}
PROGRAMS = {"rust": sorted((ROOT / "engine" / "examples").glob("*.rs")), "c": sorted((ROOT / "examples").glob("*.c"))}


def blocks(text: str) -> list:
    """(language, body, line) of every fenced code block."""
    return [(m.group(1), m.group(2), text[:m.start()].count("\n") + 1)
            for m in re.finditer(r"^```(\w*)\n(.*?)^```\s*$", text, re.S | re.M)]


def program(lang: str) -> str:
    text = README_SAMPLES[lang].read_text()
    if lang == "rust":
        text = "".join(line for line in text.splitlines(True) if not line.startswith("//!")).lstrip("\n")
    return text


def stands_in(body: str, text: str) -> bool:
    """Whether the lines of `body` (stripped) are a run of consecutive lines of `text` (stripped)."""
    want = [l.strip() for l in body.strip("\n").split("\n")]
    have = [l.strip() for l in text.split("\n")]
    return any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))


def main() -> int:
    failed = 0
    readme = ROOT / "README.md"
    found = blocks(readme.read_text())
    for lang in README_SAMPLES:
        shown = [body for l, body, _ in found if l == lang]
        if shown != [program(lang)]:
            failed += 1
            print(f"README.md: its {lang} sample is not {README_SAMPLES[lang].relative_to(ROOT)} "
                  f"({len(shown)} {lang} block(s); copy the file into the README)")
    checked = 0
    for guide in [readme, *sorted((ROOT / "docs").glob("*.md"))]:
        for lang, body, line in blocks(guide.read_text()):
            name = guide.relative_to(ROOT)
            if not lang:
                failed += 1
                print(f"{name}:{line}: a code block without a language (```text for output)")
            if guide == readme or lang not in PROGRAMS:
                continue
            checked += 1
            if not any(stands_in(body, p.read_text()) for p in PROGRAMS[lang]):
                failed += 1
                print(f"{name}:{line}: this {lang} block is in none of the programs make example runs "
                      f"({', '.join(str(p.relative_to(ROOT)) for p in PROGRAMS[lang])})")
    print(f"samples: the README's two and the guides' {checked} "
          f"{'differ from what is built' if failed else 'are code make example builds and runs'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
