"""How text that people find things by is spelt: names and labels are kept in Unicode NFC,
so that `café` typed on one system and another (precomposed, or `e` and a combining accent)
is one name; and hold no character that does not show, so that two names that look alike
are alike.

Invisible characters are Unicode's format characters (category Cf: zero-width spaces and
joiners, the byte-order mark, the soft hyphen, the bidirectional controls such as U+202E)
and control characters (Cc). Text stored before these rules may be spelt otherwise: a
lookup matches either canonical spelling of what it is given (`spellings`).
"""

from __future__ import annotations

import unicodedata

_INVISIBLE = frozenset({"Cf", "Cc"})


def nfc(text: str) -> str:
    """`text` in Unicode normalization form C."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def spellings(text: str) -> tuple[str, ...]:
    """The canonical spellings of `text` (NFC, NFD; one when they agree): what a lookup
    matches, so that text stored before it was normalized is found."""
    if text.isascii():
        return (text,)
    return tuple(dict.fromkeys((nfc(text), unicodedata.normalize("NFD", text))))


def invisible_character(text: str) -> str | None:
    """The first character of `text` that does not show (category Cf or Cc), as `U+XXXX`
    with its name where it has one; None when every character shows."""
    for character in text:
        if character.isascii() and character.isprintable():
            continue
        if unicodedata.category(character) in _INVISIBLE:
            name = unicodedata.name(character, "")
            code = f"U+{ord(character):04X}"
            return f"{code} {name}" if name else code
    return None
