"""``configuration-snippet`` / ``server-snippet`` → a header ``Program``, or a refusal.

ingress-nginx pastes snippet text into nginx.conf, which is how an Ingress
could read the controller's secrets (CVE-2021-25742, CVE-2025-1974). We
never write snippet text anywhere: ``parse`` reads it with nginx's token
rules and accepts only this subset, each argument validated, into the data
lua/headers.lua interprets (``headers.py``):

=========================================  =====================================
``add_header Name value [always];``        response: add a value
``more_set_headers 'Name: value' ...;``    response: set (``'Name:'`` removes)
``proxy_set_header Name value;``           request to the backend: set (``""`` removes)
``more_set_input_headers 'Name: v' ...;``  request: set (``'Name:'`` removes)
``set $var value;``                        a variable of the snippet's own
``return code [text];`` ``return URL;``    answer now (URL: 302)
``if ($var = value) { ... }`` (or ``!=``)  the directives above, when it holds
=========================================  =====================================

Values may read variables (``$name``, ``${name}``) from ``headers.READABLE``
and those an earlier ``set`` made; nothing else. Anything outside the subset
(``lua_*``, ``include``, ``proxy_pass``, ``location``, regex ``if``, options
of the headers-more directives, a variable we do not allow) refuses the
whole snippet with a message naming the line. The operator's switch
(``--allow-snippet-annotations``, or the ConfigMap's
``allow-snippet-annotations: "true"`` with ``annotations-risk-level:
Critical``, as ingress-nginx requires) decides whether snippets are read at
all; off, any snippet refuses the Ingress.

Differences from nginx, on purpose: ``add_header`` always applies (as with
``always``), and a ``return`` runs after the route's allow/deny lists and
limits, never before them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from platformd.ingress import headers as h
from platformd.ingress import validate as v

__all__ = ["SnippetError", "parse"]

MAX_LENGTH = 16 * 1024


class SnippetError(ValueError):
    """Refused: ``line`` (1-based) and why."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class _Token:
    text: str
    line: int
    quoted: bool = False


_SPECIAL = set(";{}")
_ACCEPTED = frozenset({"add_header", "more_set_headers", "proxy_set_header", "more_set_input_headers", "set",
                       "return", "if"})


def _tokens(text: str) -> list[_Token]:
    """nginx's lexer, reduced: words, quoted strings (with \\ escapes), ; { } and # comments."""
    out: list[_Token] = []
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c in _SPECIAL:
            out.append(_Token(c, line))
            i += 1
        elif c in "\"'":
            quote, start, i = c, line, i + 1
            buf = []
            while True:
                if i >= n:
                    raise SnippetError(start, "unterminated quoted string")
                c = text[i]
                if c == "\\" and i + 1 < n:
                    buf.append(text[i + 1])
                    i += 2
                    continue
                if c == quote:
                    i += 1
                    break
                if c == "\n":
                    line += 1
                buf.append(c)
                i += 1
            out.append(_Token("".join(buf), start, quoted=True))
        else:
            start = i
            while i < n and text[i] not in " \t\r\n;{}\"'" and not (text[i] == "#" and i == start):
                if text[i] == "\\":
                    raise SnippetError(line, "backslashes outside quotes are not accepted")
                i += 1
            word = text[start:i]
            # "${name}" is one word in nginx: keep its braces together.
            while i < n and text[i] == "{" and word.endswith("$"):
                close = text.find("}", i)
                if close < 0:
                    raise SnippetError(line, "unterminated ${...}")
                word += text[i:close + 1]
                i = close + 1
                while i < n and text[i] not in " \t\r\n;{}\"'":
                    word += text[i]
                    i += 1
            out.append(_Token(word, line))
    return out


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.own: set[str] = set()

    # -- helpers ----------------------------------------------------------------

    def value(self, token: _Token) -> h.Value:
        """A template: literal parts and variables, each readable or set before."""
        try:
            return h.template("value", token.text, self.own)
        except v.ValidationError as exc:
            raise SnippetError(token.line, f"{exc.value!r} {exc.reason}") from None

    def statement(self, line: int, make):
        try:
            return make()
        except v.ValidationError as exc:
            raise SnippetError(line, f"{exc.value!r} {exc.reason}") from None

    def directive(self) -> tuple[_Token, list[_Token], str]:
        """name, arguments and the terminator (";" or "{")."""
        name = self.tokens[self.pos]
        self.pos += 1
        args = []
        while self.pos < len(self.tokens):
            t = self.tokens[self.pos]
            self.pos += 1
            if not t.quoted and t.text in (";", "{"):
                return name, args, t.text
            if not t.quoted and t.text == "}":
                raise SnippetError(t.line, "unexpected '}'")
            args.append(t)
        raise SnippetError(name.line, f"{name.text}: missing ';'")

    # -- grammar ------------------------------------------------------------------

    def block(self, nested: bool) -> list:
        out: list = []
        while self.pos < len(self.tokens):
            t = self.tokens[self.pos]
            if not t.quoted and t.text == "}":
                if not nested:
                    raise SnippetError(t.line, "unexpected '}'")
                self.pos += 1
                return out
            if not t.quoted and t.text == ";":
                self.pos += 1
                continue
            if t.quoted or t.text == "{":
                raise SnippetError(t.line, f"expected a directive, got {t.text!r}")
            name, args, end = self.directive()
            if name.text not in _ACCEPTED:
                raise SnippetError(name.line, f"directive {name.text!r} is not accepted in a snippet (only "
                                   + ", ".join(sorted(_ACCEPTED)) + ")")
            if name.text == "if":
                if nested:
                    raise SnippetError(name.line, "an if inside an if is not accepted")
                if end != "{":
                    raise SnippetError(name.line, "if needs a { block }")
                condition = self.condition(name, args)
                body = self.block(nested=True)
                out.append(self.statement(name.line, lambda: h.If(*condition, tuple(body))))
                continue
            if end != ";":
                raise SnippetError(name.line, f"{name.text} takes no block")
            out.extend(self.simple(name, args))
        if nested:
            raise SnippetError(self.tokens[-1].line if self.tokens else 1, "missing '}'")
        return out

    def condition(self, name: _Token, args: list[_Token]) -> tuple[str, bool, h.Value]:
        # nginx splits "($a" "=" "b)" on spaces: join and re-read the words.
        words = [a.text for a in args]
        if not args or not words[0].startswith("(") or not words[-1].endswith(")"):
            raise SnippetError(name.line, "if needs a condition in parentheses")
        words[0], words[-1] = words[0][1:], words[-1][:-1]
        tokens = [_Token(w, a.line, a.quoted) for w, a in zip(words, args)]
        if tokens and tokens[0].text == "":
            tokens = tokens[1:]
        if tokens and tokens[-1].text == "" and not tokens[-1].quoted:
            tokens = tokens[:-1]
        if len(tokens) != 3 or tokens[1].text not in ("=", "!="):
            raise SnippetError(name.line, "if accepts only ($variable = value) or ($variable != value)")
        m = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", tokens[0].text)
        if m is None:
            raise SnippetError(name.line, "if must compare a variable")
        variable = m.group(1)
        if not (h.readable(variable) or variable in self.own):
            raise SnippetError(name.line, f"variable ${variable} is not one a snippet may read")
        return variable, tokens[1].text == "!=", self.value(tokens[2])

    def simple(self, name: _Token, args: list[_Token]) -> list:
        line, d = name.line, name.text
        if d == "add_header":
            if len(args) == 3 and args[2].text == "always" and not args[2].quoted:
                args = args[:2]
            if len(args) != 2:
                raise SnippetError(line, "add_header takes a name and a value (and 'always')")
            return [self.statement(line, lambda: h.HeaderOp("response", "add", args[0].text, self.value(args[1])))]
        if d == "proxy_set_header":
            if len(args) != 2:
                raise SnippetError(line, "proxy_set_header takes a name and a value")
            value = self.value(args[1])
            action = "set" if value else "remove"
            return [self.statement(line, lambda: h.HeaderOp("request", action, args[0].text, value))]
        if d in ("more_set_headers", "more_set_input_headers"):
            side = "response" if d == "more_set_headers" else "request"
            if not args:
                raise SnippetError(line, f"{d} needs at least one 'Name: value'")
            out = []
            for a in args:
                if a.text.startswith("-"):
                    raise SnippetError(line, f"{d} options ({a.text}) are not accepted")
                header, sep, rest = a.text.partition(":")
                if not sep:
                    raise SnippetError(line, f"{a.text!r} is not 'Name: value'")
                value = self.value(_Token(rest.strip(), a.line, True))
                action = "set" if value else "remove"
                out.append(self.statement(line, lambda: h.HeaderOp(side, action, header.strip(), value)))
            return out
        if d == "set":
            if len(args) != 2:
                raise SnippetError(line, "set takes a variable and a value")
            m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", args[0].text)
            if m is None:
                raise SnippetError(line, "set needs a $variable")
            value = self.value(args[1])
            statement = self.statement(line, lambda: h.SetVar(m.group(1), value))
            self.own.add(m.group(1))
            return [statement]
        if d == "return":
            return [self.statement(line, lambda: self.return_(line, args))]
        raise SnippetError(line, f"directive {d!r} is not accepted in a snippet")

    def return_(self, line: int, args: list[_Token]) -> h.Return:
        if len(args) == 1 and not re.fullmatch(r"[0-9]{3}", args[0].text):
            target = self.value(args[0])
            first = target[0] if target else ""
            if not (isinstance(first, str) and re.match(r"https?://", first)):
                raise SnippetError(line, "return URL must start with http:// or https://")
            return h.Return(302, target)
        if not args or len(args) > 2 or not re.fullmatch(r"[0-9]{3}", args[0].text):
            raise SnippetError(line, "return takes a status code and an optional text or URL")
        code = int(args[0].text)
        value = self.value(args[1]) if len(args) == 2 else ()
        return h.Return(code, value)


def parse(text: str) -> h.Program:
    """The program ``text`` means, or SnippetError naming the first bad line."""
    if not isinstance(text, str):
        raise SnippetError(1, "must be a string")
    if len(text) > MAX_LENGTH:
        raise SnippetError(1, f"is {len(text)} characters long (at most {MAX_LENGTH})")
    if re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", text):
        line = text[:re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", text).start()].count("\n") + 1
        raise SnippetError(line, "contains a control character")
    parser = _Parser(_tokens(text))
    program = tuple(parser.block(nested=False))
    try:
        return h.check_program("snippet", program)
    except v.ValidationError as exc:
        raise SnippetError(1, exc.reason) from None
