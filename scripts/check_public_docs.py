#!/usr/bin/env python3
"""Holds the public API to DESIGN.md ("Layers"): every public declaration of include/strata/strata.h,
strata.hpp and overlap.hpp has a /// doc comment of its own, directly above it.

Public declarations: functions (multi-line prototypes, default arguments, templates and inline bodies
included), typedefs, struct/class/union/enum definitions, `using` aliases, #define macros other than the
include guard, enumerators, and the members (functions and fields) of the public sections of the public
classes. A `///` block counts when its last line is the line just above the declaration (above its
`template <...>` line, for a template); a plain `//` comment, a blank line or another declaration in between
does not. Enumerators and fields may instead carry a trailing `///<` comment on one of their lines.

usage: scripts/check_public_docs.py [--root DIR]   (DIR: the repository root; default: this script's parent's parent)
Prints one line per violation and exits 1; exits 0 when every public declaration is documented. Also run by
scripts/check_layers.py (ctest layer_check), which imports check().
"""
import argparse
import os
import re
import sys

HEADERS = ("include/strata/strata.h", "include/strata/strata.hpp", "include/strata/overlap.hpp")
RULE = "(DESIGN.md, Layers: every public declaration is documented)"

# Statements that declare nothing a reader looks up.
NOT_DECLARATIONS = re.compile(r"^(static_assert\b|friend\b|using\s+namespace\b)")
TYPE_HEAD = re.compile(r"^(?:template\s*<.*>\s*)?(?:typedef\s+)?(struct|class|union|enum(?:\s+(?:class|struct))?)\b")


class Line:
    """One source line: its code (comments removed, string contents neutralised) and what comment it holds."""

    def __init__(self):
        self.code = ""
        self.doc = False  # the line is a /// comment and nothing else
        self.trailing_doc = False  # a ///< comment follows code on this line


def lex(text):
    """Splits C/C++ text into Lines. Comments are dropped from the code; inside string and character literals,
    every character but letters, digits and _ becomes _, so that no brace, parenthesis or semicolon in a
    literal is taken for code."""
    lines = [Line()]
    i, n = 0, len(text)
    in_block = False
    while i < n:
        c = text[i]
        cur = lines[-1]
        if c == "\n":
            lines.append(Line())
            i += 1
            continue
        if in_block:
            if text.startswith("*/", i):
                in_block = False
                i += 2
            else:
                i += 1
            continue
        if text.startswith("/*", i):
            in_block = True
            i += 2
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            comment = text[i:end]
            if comment.startswith("///<"):
                cur.trailing_doc = bool(cur.code.strip())
            elif comment.startswith("///") and not comment.startswith("////") and not cur.code.strip():
                cur.doc = True
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            body = re.sub(r"\W", "_", text[i + 1:j])
            cur.code += c + body + c
            i = j + 1
            continue
        cur.code += c
        i += 1
    return lines


def strip_template_args(text):
    """text without its <...> template argument lists, so that std::function<void()> is not a call."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "<" and text.startswith("<<", i):
            out.append("<<")
            i += 2
            continue
        if c == "<" and re.search(r"\w\s*$", "".join(out)) and not re.search(r"operator\s*$", "".join(out)):
            depth, j = 0, i
            while j < len(text):
                if text[j] == "<":
                    depth += 1
                elif text[j] == ">":
                    depth -= 1
                    if depth == 0:
                        break
                elif text[j] in ";{}":
                    break
                j += 1
            if j < len(text) and text[j] == ">" and depth == 0:
                i = j + 1
                continue
        out.append(c)
        i += 1
    return "".join(out)


def normalize(text):
    """A declaration's text without what hides its shape: template argument lists (std::function<void()> is no
    call), attributes ([[nodiscard]], __attribute__((...)), alignas(...)) and a leading template <...>."""
    t = re.sub(r"\[\[.*?\]\]", " ", text)
    t = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", " ", t)
    t = re.sub(r"\b(?:alignas|__declspec)\s*\((?:[^()]|\([^()]*\))*\)", " ", t)
    t = strip_template_args(t)
    return re.sub(r"^\s*template\b\s*", "", t)


def is_function(text):
    """A function declaration or definition head: a parameter list before any initializer."""
    t = re.sub(r"operator\s*(==|!=|<=|>=|=)", "operator@", normalize(text))
    paren, eq = t.find("("), t.find("=")
    return paren >= 0 and (eq < 0 or paren < eq)


def in_member_init_list(text):
    """A brace that follows `Foo(...) : member` opens a member's initializer, not the constructor's body."""
    t = normalize(text)
    return bool(re.search(r"\)[^()]*(?<!:):(?!:)", t)) and bool(re.search(r"[\w>]\s*$", t))


def function_name(text):
    t = normalize(text)
    head = t[:t.find("(")] if "(" in t else t
    m = re.search(r"(operator\s*[^\s(]+(?:\s+\w+)?|~?\w+)\s*$", head)
    return re.sub(r"\s+", " ", m.group(1)) if m else head.strip()[:40]


def typedef_name(text):
    m = re.search(r"\(\s*\*\s*(\w+)\s*\)", text)  # a pointer to function: typedef int (*name)(int);
    return m.group(1) if m else last_identifier(text)


def last_identifier(text):
    t = re.sub(r"\[.*?\]", "", text)
    names = re.findall(r"[A-Za-z_]\w*", t)
    return names[-1] if names else "?"


def documented_above(lines, line):
    """The line just above `line` (1-based) is a /// comment line."""
    return line >= 2 and lines[line - 2].doc


def trailing_doc_on(lines, first, last, last_on_line):
    """A ///< comment on one of the lines first..last; on the last line only if no other declaration ends after
    this one there (int a; int b; ///< documents b alone)."""
    return any(lines[k - 1].trailing_doc and (k < last or last_on_line) for k in range(first, last + 1))


class Scanner:
    """Walks a header's code character by character, keeping a stack of scopes, and collects every public
    declaration with the lines where it starts and ends."""

    def __init__(self, lines):
        self.lines = lines
        self.found = []  # (line, summary, trailing_ok, first, last, shares_line)
        self.started = set()  # lines on which a statement or an enumerator starts
        # A scope: kind ns | class | enum | body; public: whether its declarations are public; name; decl (a type
        # definition's own declaration, finished when the scope closes).
        self.stack = [{"kind": "ns", "public": True, "name": ""}]
        self.decl = None
        self.enumerator = None

    def qualified(self, name):
        owners = [s["name"] for s in self.stack if s["kind"] == "class" and s["name"]]
        return "::".join(owners + [name])

    def public(self):
        return all(s["public"] for s in self.stack)

    def record(self, line, summary, trailing_ok, last, shares_line=False):
        if self.public():
            self.found.append((line, summary, trailing_ok, line, last, shares_line))

    def starts_on(self, ln):
        """Whether something else started on line ln before: then a /// above it is not this one's."""
        shared = ln in self.started
        self.started.add(ln)
        return shared

    def start(self, ln):
        if self.decl is None:
            self.decl = {"line": ln, "text": "", "parens": 0, "tail": None, "shares": self.starts_on(ln)}

    def finish_statement(self, ln):
        d, self.decl = self.decl, None
        if d is None:
            return
        summary, trailing_ok = self.describe(re.sub(r"\s+", " ", d["text"]).strip(), d["tail"])
        if summary:
            self.record(d["line"], summary, trailing_ok, ln, d["shares"])

    def describe(self, text, tail):
        """(what the statement declares, whether a trailing ///< may document it); (None, _) for no declaration."""
        if tail is not None:  # a type definition: struct X {...}; typedef struct {...} name;
            kind, head = tail
            if head.startswith("typedef"):
                return "typedef %s" % self.qualified(typedef_name(text)), False
            return "%s %s" % (kind, self.qualified(self.type_name(head) or "(anonymous)")), False
        if not text or NOT_DECLARATIONS.match(text):
            return None, False
        in_class = self.stack[-1]["kind"] == "class"
        if re.match(r"^typedef\b", text):
            return "typedef %s" % self.qualified(typedef_name(text)), False
        if re.match(r"^using\b", text):
            return "alias %s" % self.qualified(re.match(r"^using\s+(\w+)", text + " x").group(1)), False
        if TYPE_HEAD.match(text):  # a declaration of a type (struct X;)
            return "%s %s" % (TYPE_HEAD.match(text).group(1), self.qualified(last_identifier(text))), False
        if is_function(text):
            return "%s %s" % ("member function" if in_class else "function", self.qualified(function_name(text))), False
        name = last_identifier(re.split(r"[=({]", normalize(text))[0])
        return "%s %s" % ("field" if in_class else "variable", self.qualified(name)), True

    @staticmethod
    def type_name(head):
        h = re.sub(r"^template\s*<.*?>\s*", "", head)
        h = re.split(r"(?<!:):(?!:)", h)[0]  # before the base list or the enum's underlying type
        h = re.sub(r"\b(final|alignas\s*\(.*?\))", "", h)
        name = last_identifier(h)
        return "" if name in ("struct", "class", "union", "enum") else name

    def open_brace(self, ln):
        d = self.decl
        text = re.sub(r"\s+", " ", d["text"]).strip()
        if d["parens"] > 0 or d["tail"] is not None:
            self.stack.append({"kind": "body", "public": True, "name": "", "ends": False})
            d["text"] += "{"
            return
        if re.match(r'^(namespace\b|extern\s*"C"$)', text):
            name = re.sub(r"^namespace\s*", "", text) if text.startswith("namespace") else ""
            self.stack.append({"kind": "ns", "public": True, "name": name})
            self.decl = None
            return
        m = TYPE_HEAD.match(text)
        if m and not is_function(text):
            kind = m.group(1)
            name = self.type_name(text)
            d["tail"] = (re.sub(r"\s+", " ", kind), text)
            self.stack.append({"kind": "enum" if kind.startswith("enum") else "class", "public": kind != "class",
                               "name": name, "decl": d})
            self.decl = None
            return
        if is_function(text) and not in_member_init_list(text):
            self.finish_statement(ln)
            self.stack.append({"kind": "body", "public": True, "name": "", "ends": True})
            return
        # A brace initializer (int x{0}; = {...}): part of the statement.
        self.stack.append({"kind": "body", "public": True, "name": "", "ends": False})
        d["text"] += "{"

    def close_scope(self, ln):
        scope = self.stack.pop()
        if scope["kind"] in ("class", "enum"):
            self.decl = scope["decl"]
            self.decl["text"] += "}"
        else:
            self.decl = None

    def finish_enumerator(self):
        e, self.enumerator = self.enumerator, None
        if e and e["text"].strip():
            self.record(e["line"], "enumerator %s" % self.qualified(re.match(r"\s*(\w+)", e["text"]).group(1)),
                        True, e["last"], e["shares"])

    def feed(self, ln, c):
        top = self.stack[-1]
        if top["kind"] == "body":
            if c == "{":
                self.stack.append({"kind": "body", "public": True, "name": "", "ends": False})
            elif c == "}":
                self.stack.pop()
                if top["ends"]:
                    self.decl = None
                elif self.decl is not None:
                    self.decl["text"] += "}"
            return
        if top["kind"] == "enum":
            e = self.enumerator
            if c == "}" and (e is None or e["parens"] == 0):
                self.finish_enumerator()
                self.close_scope(ln)
            elif c == "," and e is not None and e["parens"] == 0:
                self.finish_enumerator()
            elif not c.isspace():
                if e is None:
                    e = {"line": ln, "text": "", "parens": 0, "last": ln, "shares": self.starts_on(ln)}
                    self.enumerator = e
                e["parens"] += {"(": 1, ")": -1}.get(c, 0)
                e["text"] += c
                e["last"] = ln
            elif e is not None:
                e["text"] += " "
            return
        if c.isspace():
            if self.decl is not None:
                self.decl["text"] += " "
            return
        self.start(ln)
        d = self.decl
        if c == "(":
            d["parens"] += 1
        elif c == ")":
            d["parens"] -= 1
        if c == "{":
            self.open_brace(ln)
        elif c == "}" and d["parens"] == 0:
            self.close_scope(ln)
        elif c == ";" and d["parens"] == 0:
            self.finish_statement(ln)
        elif c == ":" and top["kind"] == "class" and d["text"].strip() in ("public", "private", "protected"):
            top["public"] = d["text"].strip() == "public"
            self.decl = None
        else:
            d["text"] += c

    def scan(self):
        guards = set()
        continued = False
        for ln, line in enumerate(self.lines, 1):
            code = line.code
            if continued or code.lstrip().startswith("#"):
                continued = code.rstrip().endswith("\\")
                if line.code.lstrip().startswith("#"):
                    self.directive(ln, code.strip(), guards)
                continue
            for c in code:
                self.feed(ln, c)
            self.feed(ln, "\n")

    def directive(self, ln, code, guards):
        m = re.match(r"#\s*ifndef\s+(\w+)", code)
        if m:
            guards.add(m.group(1))
            return
        m = re.match(r"#\s*define\s+(\w+)(.*)$", code)
        if m:
            name, rest = m.group(1), m.group(2).strip()
            if name in guards and not rest:
                return  # the include guard
            self.record(ln, "macro %s" % name, False, ln, self.starts_on(ln))


def check_file(root, path):
    full = os.path.join(root, path)
    if not os.path.isfile(full):
        return ["%s: missing: the public API is these headers %s" % (path, RULE)]
    with open(full, encoding="utf-8", errors="replace") as f:
        lines = lex(f.read())
    scanner = Scanner(lines)
    scanner.scan()
    # The declaration that ends last on each line (found in source order) is the one a ///< there documents.
    ends_last = {}
    for i, (_, _, trailing_ok, _, last, _) in enumerate(scanner.found):
        if trailing_ok:
            ends_last[last] = i
    bad = []
    for i, (line, summary, trailing_ok, first, last, shares) in sorted(enumerate(scanner.found), key=lambda e: e[1]):
        if (documented_above(lines, line) and not shares) or (trailing_ok and
                                             trailing_doc_on(lines, first, last, ends_last.get(last) == i)):
            continue
        bad.append("%s:%d: %s has no /// comment of its own %s" % (path, line, summary, RULE))
    return bad


def check(root):
    """Violations (one string each) of the rule that every public declaration of HEADERS is documented."""
    bad = []
    for path in HEADERS:
        bad.extend(check_file(root, path))
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = parser.parse_args()
    bad = check(os.path.abspath(args.root))
    for line in bad:
        print(line)
    if bad:
        print("check_public_docs: %d undocumented public declaration(s)" % len(bad))
        return 1
    print("check_public_docs: every public declaration of %s is documented" % ", ".join(HEADERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
