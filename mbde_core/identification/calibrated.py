"""Write the calibrated mechanism YAML: the user's file with the identified values.

The original text is edited in place so that its comments, expressions and layout
survive: each identified scalar is replaced by its value and its line gains a comment
``# identified: <label> = <value> +- <std> <unit>``; joints that had no damping load get
one appended to ``loads:``; a ``gravity:`` or ``sensors:`` section the file lacked is
appended. A header comment lists every parameter (identified or not, with the reason).
The result is parsed back and compared with the intended document; if the in-place
edit cannot be done (e.g. a flow-style ``loads: [...]``) the document is written out
whole by PyYAML instead, with the same header (comments of the original are then lost).
"""
from __future__ import annotations

import math

import yaml

from mbde_core.identification.keypath import is_joint_load


def _fmt(v: float) -> str:
    """10 significant digits, always read back as a float by YAML 1.1 readers (PyYAML wants
    a dot in the mantissa of an exponent form: 1.0e-07, not 1e-07)."""
    text = f"{float(v):.10g}"
    if "e" in text and "." not in text.split("e")[0]:
        mant, exp = text.split("e")
        text = f"{mant}.0e{exp}"
    return text


def _find(node, path):
    """The composed YAML node at a document path (keys / indices), or None."""
    for key in path:
        if isinstance(node, yaml.MappingNode):
            hit = [v for k, v in node.value if k.value == key]
            if not hit:
                return None
            node = hit[0]
        elif isinstance(node, yaml.SequenceNode):
            if not isinstance(key, int) or key >= len(node.value):
                return None
            node = node.value[key]
        else:
            return None
    return node


class _Dumper(yaml.SafeDumper):
    """Floats with 10 significant digits (the identified values' comments use the same)."""


_Dumper.add_representer(float, lambda d, v: d.represent_scalar("tag:yaml.org,2002:float", _fmt(v))
                        if "e" in _fmt(v) or "." in _fmt(v) else d.represent_int(int(v)))


def _flow(item) -> str:
    return yaml.dump(item, Dumper=_Dumper, default_flow_style=True, sort_keys=False, width=10_000).strip()


class _Editor:
    def __init__(self, text: str):
        self.text = text
        self.root = yaml.compose(text)
        self.edits: list[tuple[int, int, str]] = []  # (start, end, replacement)
        self.comments: dict[int, list[str]] = {}  # line -> comments
        self.appends: list[str] = []
        self.new_lists: dict[str, list] = {}  # top-level block sequences to create

    def scalar(self, path, value, comment) -> bool:
        node = _find(self.root, path)
        if not isinstance(node, yaml.ScalarNode):
            return False
        self.edits.append((node.start_mark.index, node.end_mark.index, _fmt(value)))
        self.comments.setdefault(node.end_mark.line, []).append(comment)
        return True

    def vector(self, path, values, comment) -> bool:
        node = _find(self.root, path)
        if not isinstance(node, yaml.SequenceNode) or len(node.value) != len(values):
            return False
        for child, v in zip(node.value, values):
            if not isinstance(child, yaml.ScalarNode):
                return False
            self.edits.append((child.start_mark.index, child.end_mark.index, _fmt(v)))
        self.comments.setdefault(node.value[-1].end_mark.line, []).append(comment)
        return True

    def append_item(self, key, item, comment: str = "") -> bool:
        """Append a list item to the top-level block sequence ``key`` (or create it)."""
        node = _find(self.root, [key])
        if node is None:
            self.new_lists.setdefault(key, []).append((item, comment))
            return True
        if not isinstance(node, yaml.SequenceNode) or node.flow_style or not node.value:
            return False
        last = node.value[-1]
        indent = last.start_mark.column - 2
        if last.end_mark.column == 0:  # a block item ends at the start of the next line
            pos = last.end_mark.index
        else:
            pos = self.text.find("\n", last.end_mark.index)
            pos = len(self.text) if pos < 0 else pos + 1
        self.edits.append((pos, pos, " " * indent + f"- {_flow(item)}" + (f"  # {comment}" if comment else "") + "\n"))
        return True

    def render(self) -> str:
        text = self.text
        edits = list(self.edits)
        for line, comments in self.comments.items():  # at the end of the line (scalar edits keep lines)
            end = _line_end(text, line)
            edits.append((end, end, "  # " + "; ".join(comments)))
        for start, end, rep in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
            text = text[:start] + rep + text[end:]
        tail = self.appends + [f"{key}:\n" + "".join(f"  - {_flow(it)}" + (f"  # {c}" if c else "") + "\n" for it, c in items) for key, items in self.new_lists.items()]
        if tail:
            if not text.endswith("\n"):
                text += "\n"
            text += "".join(tail)
        return text


def _line_end(text: str, line: int) -> int:
    """Index of the end of line ``line`` (0-based) of text."""
    pos = 0
    for _ in range(line):
        pos = text.index("\n", pos) + 1
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


def _header(lines) -> str:
    return "".join(f"# {ln}\n" if ln else "#\n" for ln in lines)


def _with_header(text: str, header: str) -> str:
    """Insert the header after a leading %YAML directive / '---' marker, else at the top."""
    lines = text.split("\n")
    k = 0
    while k < len(lines) and (lines[k].startswith("%") or lines[k].strip() == "---"):
        k += 1
    if k == 0:
        return header + text
    return "\n".join(lines[:k]) + "\n" + header + "\n".join(lines[k:])


def calibrated_text(source_text: str | None, original_doc: dict, new_doc: dict, params, values, stds,
                    identifiable, header_lines) -> tuple[str, str]:
    """(YAML text, 'edited' | 'rewritten') of the calibrated mechanism.

    original_doc: the document as read; new_doc: the intended document (identified
    values set, sensors added); params: Parameter list; values/stds (P,): estimates and
    standard deviations (NaN std for a parameter not identified); identifiable (P,) bools.
    """
    header = _header(header_lines)
    if source_text is not None:
        try:
            text = _edit(source_text, original_doc, new_doc, params, values, stds, identifiable)
            if text is not None and _equal(yaml.safe_load(text), new_doc):
                return _with_header(text, header), "edited"
        except yaml.YAMLError:
            pass
    body = yaml.safe_dump(new_doc, sort_keys=False, default_flow_style=None, width=100)
    return "%YAML 1.2\n---\n" + header + body, "rewritten"


def _comment(par, value, std, ok) -> str:
    if not ok:
        return f"{par.label}: not identifiable, value kept"
    return f"identified {par.label} = {_fmt(value)} +- {std:.3g} {par.unit}".rstrip()


def _edit(text, original_doc, new_doc, params, values, stds, identifiable):
    ed = _Editor(text)
    for par, v, s, ok in zip(params, values, stds, identifiable):
        kind, where = par.target
        comment = _comment(par, v, s, ok)
        if kind in ("gravity", "gravity_tilt"):
            g = new_doc["gravity"]
            if "gravity" in original_doc:
                if not ed.vector(["gravity"], g, comment):
                    return None
            else:
                ed.appends.append(f"gravity: [{_fmt(g[0])}, {_fmt(g[1])}]  # {comment}\n")
        elif kind in ("joint", "joint_friction"):
            continue  # handled with the loads below
        else:
            if not ed.scalar(list(where), new_doc_value(new_doc, where), comment):
                return None
    old_loads = original_doc.get("loads") or []
    new_loads = new_doc.get("loads") or []
    joint_params = [(par, v, s, ok) for par, v, s, ok in zip(params, values, stds, identifiable)
                    if par.target[0] in ("joint", "joint_friction")]
    for i, ld in enumerate(new_loads):
        par = next((j for j in joint_params if _joint_load_matches(j[0], ld, new_doc)), None)
        if par is None:
            continue
        if i < len(old_loads):
            if not ed.scalar(["loads", i, "c"], ld["c"], _comment(*par)):
                return None
        elif not ed.append_item("loads", ld, _comment(*par)):
            return None
    if "sensors" in new_doc and "sensors" not in original_doc:
        ed.appends.append(yaml.safe_dump({"sensors": new_doc["sensors"]}, sort_keys=False, default_flow_style=None, width=100))
    return ed.render()


def _joint_load_matches(par, ld, doc) -> bool:
    _, body, body2 = par.target[1]
    return is_joint_load(doc, ld, body, body2, "joint_damping" if par.target[0] == "joint" else "joint_friction")


def new_doc_value(doc, where):
    node = doc
    for k in where:
        node = node[k]
    return node


def _equal(a, b, tol=1e-9) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k], tol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=1e-300)
    return a == b
