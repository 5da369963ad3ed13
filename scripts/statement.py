"""The text of a statement of src/store/targets.rs (`const NAME: &str = r#"…"#;`, or
`concat!(…)` of raw strings, plain strings and that file's text macros such as
`pending_due!()`), for the scripts that EXPLAIN the statements the code runs."""
import re

SRC = "src/store/targets.rs"
_LITERAL = r'r#"(.*?)"#|"((?:[^"\\]|\\.)*)"'


def _unescape(plain):
    return plain.encode().decode("unicode_escape")


def statement(name, path=SRC):
    src = open(path).read()
    macros = {}
    for m in re.finditer(r'macro_rules! (\w+) \{\s*\(\) => \{\s*(?:' + _LITERAL + r')\s*\};\s*\}', src, re.S):
        macros[m.group(1)] = m.group(2) if m.group(2) is not None else _unescape(m.group(3))
    m = re.search(r'const ' + name + r': &str =\s*(?:r#"(.*?)"#|"((?:[^"\\]|\\.)*)"|concat!\((.*?)\);)', src, re.S)
    if m is None:
        raise SystemExit(f"no const {name} in {path}")
    if m.group(1) is not None:
        return m.group(1)
    if m.group(2) is not None:
        return _unescape(m.group(2))
    out = []
    for part in re.finditer(_LITERAL + r'|(\w+)!\(\)', m.group(3), re.S):
        raw, plain, mac = part.groups()
        out.append(raw if raw is not None else _unescape(plain) if plain is not None else macros[mac])
    return "".join(out)
