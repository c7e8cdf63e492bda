#!/usr/bin/env python3
"""The README's samples are programs the tests build and run: its ```rust block must be
engine/examples/readme_taste.rs (without the file's //! header) and its ```c block
examples/minimal.c, character for character. `make example` runs both programs, then this.

    python3 tests/docs/samples.py [README.md]
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = {"rust": ROOT / "engine" / "examples" / "readme_taste.rs", "c": ROOT / "examples" / "minimal.c"}


def blocks(text: str) -> list:
    """(language, body) of every fenced code block."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```\s*$", text, re.S | re.M)]


def program(lang: str) -> str:
    text = SAMPLES[lang].read_text()
    if lang == "rust":
        text = "".join(line for line in text.splitlines(True) if not line.startswith("//!")).lstrip("\n")
    return text


def main() -> int:
    readme = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "README.md"
    found = blocks(readme.read_text())
    failed = 0
    for lang in SAMPLES:
        shown = [body for l, body in found if l == lang]
        if shown != [program(lang)]:
            failed += 1
            print(f"{readme.name}: its {lang} sample is not {SAMPLES[lang].relative_to(ROOT)} "
                  f"({len(shown)} {lang} block(s); copy the file into the README)")
    # An unlabelled block would be taken for Rust by rustdoc and by readers: say what each is.
    unlabelled = sum(1 for l, _ in found if not l)
    if unlabelled:
        failed += 1
        print(f"{readme.name}: {unlabelled} code block(s) without a language (```text for output)")
    print(f"{readme.name}: samples {'differ' if failed else 'are the programs make example runs'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
