#!/usr/bin/env python3
"""Hand-written mutations keyed to named code (scripts/mutations.txt), for scripts/mutants-named.sh.

Each mutation names a file, an item in it (a `fn`, `const`, `struct`, `enum` or `impl` name) and a
fragment of that item's text with its replacement. The fragment is matched inside the item only,
whitespace-insensitively, and must occur there exactly once — so reformatting, moving the item
within its file, or editing other items never breaks a mutation; changing the fragment itself does,
loudly.

  mutate.py list FILE                      the mutations: index, name, test filters, file (tab-separated)
  mutate.py check FILE                     every mutation applies (no build): exit 1 naming the ones that do not
  mutate.py apply FILE INDEX               apply mutation INDEX to the working tree
  mutate.py changed FILE BASE              indexes of the mutations whose item differs from git revision BASE
"""
import re
import subprocess
import sys

ITEM_START = r"^(?P<indent>\s*)(?:pub(?:\([a-z]+\))?\s+)?(?:async\s+)?(?:fn|const|struct|enum|impl(?:<[^>]*>)?)\s+{name}\b"


def load(path):
    """The mutations: (name, file, item, old, new, tests) per non-comment line, `|`-separated."""
    out = []
    for n, line in enumerate(open(path), 1):
        line = line.rstrip("\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != 6:
            sys.exit(f"{path}:{n}: expected 6 fields separated by ' | ', found {len(parts)}")
        out.append(tuple(parts))
    return out


def spans(text, item):
    """(start, end) character offsets of every item named `item` in `text` (several when, say, two
    impls each have a `fn new`)."""
    lines = text.split("\n")
    pat = re.compile(ITEM_START.format(name=re.escape(item)))
    out = []
    for i, line in enumerate(lines):
        m = pat.match(line)
        if not m:
            continue
        indent = m.group("indent")
        end = None
        if re.search(r"\bfn\b|\bimpl\b|\bstruct\b|\benum\b", line[: m.end()]) and not line.rstrip().endswith(";"):
            # rustfmt closes a block item with its own indentation and a lone brace.
            for j in range(i, len(lines)):
                if lines[j] == indent + "}" or (j == i and line.rstrip().endswith("}")):
                    end = j
                    break
        else:
            for j in range(i, len(lines)):
                if lines[j].rstrip().endswith(";"):
                    end = j
                    break
        if end is not None:
            start_off = sum(len(l) + 1 for l in lines[:i])
            end_off = sum(len(l) + 1 for l in lines[: end + 1])
            out.append((start_off, end_off))
    return out


def fragment_re(old):
    return re.compile(r"\s+".join(re.escape(tok) for tok in old.split()))


def locate(text, item, old):
    """(start, end) of the one occurrence of `old` inside the items named `item`; raises
    ValueError otherwise."""
    ss = spans(text, item)
    if not ss:
        raise ValueError(f"item {item!r} not found")
    found = [
        (a + m.start(), a + m.end())
        for a, b in ss
        for m in fragment_re(old).finditer(text[a:b])
    ]
    if len(found) != 1:
        raise ValueError(f"fragment found {len(found)} times in {item!r}: {old!r}")
    return found[0]


def normalized_item(text, item):
    ss = spans(text, item)
    return None if not ss else " ".join(" ".join(text[a:b].split()) for a, b in ss)


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    muts = load(path)
    if cmd == "list":
        for i, (name, file, _, _, _, tests) in enumerate(muts):
            print(f"{i}\t{name}\t{tests}\t{file}")
    elif cmd == "check":
        bad = 0
        for name, file, item, old, _, _ in muts:
            try:
                locate(open(file).read(), item, old)
            except (ValueError, FileNotFoundError) as e:
                print(f"mutation {name!r} ({file}): {e}", file=sys.stderr)
                bad += 1
        if bad:
            sys.exit(f"{bad} mutations do not apply: update {path}")
        print(f"all {len(muts)} mutations apply")
    elif cmd == "apply":
        name, file, item, old, new, _ = muts[int(sys.argv[3])]
        text = open(file).read()
        a, b = locate(text, item, old)
        open(file, "w").write(text[:a] + new + text[b:])
    elif cmd == "changed":
        base = sys.argv[3]
        for i, (name, file, item, _, _, _) in enumerate(muts):
            now = normalized_item(open(file).read(), item)
            was = subprocess.run(["git", "show", f"{base}:{file}"], capture_output=True, text=True)
            before = normalized_item(was.stdout, item) if was.returncode == 0 else None
            if now != before:
                print(i)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
