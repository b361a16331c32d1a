"""JSON Schema ``format`` values as regular languages (over decoded strings).

Each known format maps to a regular expression whose language is **a subset of the strings
valid for that format** (equal to it where the note says "exact").  Generating from a subset is
sound: every string produced is valid; a valid-but-excluded string (an 8-label hostname, a leap
second with a ``-08:00`` offset) is merely never generated.  Unknown formats are
reported by the JSON Schema front-end (:mod:`formcast.frontends.jsonschema.api`) instead of being
ignored.

``FORMATS`` maps a format name to a :class:`FormatSpec`; :func:`format_node` returns the IR.
The docs table (``docs/json_schema.md``) is generated from ``FORMATS``.

Lifetime: module constants; :func:`format_node` caches parsed IR per name.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.nodes import ANY_CHAR, Node, repeat
from ...limits import metered_cache
from ..regex import parse_regex

__all__ = ["ANNOTATION_FORMATS", "FORMATS", "FormatSpec", "format_node"]


@dataclass(frozen=True)
class FormatSpec:
    """A supported ``format``.

    Attributes:
        name: the format name as written in schemas.
        regex: a Python-dialect regular expression (fullmatch) of the strings generated.
        exact: True when ``regex`` accepts exactly the valid strings; False for a documented
            subset.
        note: what the subset leaves out, or the standard followed.
    """

    name: str
    regex: str
    exact: bool
    note: str


_D = "[0-9]"
_HEX = "[0-9A-Fa-f]"
_LEAP = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
#: years 0001-9999: RFC 3339's grammar admits 0000, but no validator's calendar does (Python's
#: ``datetime``, which ``jsonschema`` uses, starts at year 1)
_YEAR = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_DATE = (
    f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    f"|{_LEAP}-02-29)"
)
_FRAC = "(?:\\.[0-9]+)?"
_OFFSET = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"


def _leap_seconds() -> str:
    """RFC 3339 leap seconds as the JSON-Schema-Test-Suite reads them (``hh:mm:60`` where the
    local time minus the offset is 23:59 UTC), for the UTC forms only: ``23:59:60`` with ``Z``,
    ``+00:00`` or ``-00:00``.  With other offsets each local minute asks for its own offset:
    whole hours alone add ~150 automaton states to every ``date-time`` (0.07 s -> 0.5 s to
    compile one, 7 s with a ``maxLength``), all offsets ~11,000."""
    return f"23:59:60{_FRAC}(?:[Zz]|[+-]00:00)"


_TIME = f"(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]{_FRAC}{_OFFSET}|{_leap_seconds()})"
_DUR_TIME = "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DURATION = (
    "P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
    f"(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)"
)
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = f"{_OCTET}(?:\\.{_OCTET}){{3}}"
_H16 = f"{_HEX}{{1,4}}"
_LS32 = f"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = (
    "(?:"
    f"(?:{_H16}:){{6}}{_LS32}"
    f"|::(?:{_H16}:){{5}}{_LS32}"
    f"|(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}"
    f"|(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}"
    f"|(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}"
    f"|(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}"
    f"|(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}"
    f"|(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}"
    f"|(?:(?:{_H16}:){{0,6}}{_H16})?::"
    ")"
)


def _ldh_label(n: int, *, last: bool = False) -> str:
    """An RFC 1123 label of 1-``n`` letters, digits and hyphens (no hyphen first or last; a
    digit may come first) that does not start with the IDNA ACE prefix ``xn--`` (any case): an
    A-label is valid only if its Punycode decodes to a valid U-label (RFC 5890/5891), which no
    regular language of bounded size checks, so none is accepted.  ``last``: not all digits
    either (the top-level label: RFC 3696 section 2, and RFC 1123 section 2.1's "a valid host
    name can never have the dotted-decimal form #.#.#.#"); one starting with a digit must end
    with a letter."""
    alnum, ldh = "[A-Za-z0-9]", "[A-Za-z0-9-]"
    if last:  # a digit first: ending with a letter (a digit-first label ending in a digit
        # is left out: "not all digits" with a length bound costs an automaton per position)
        first = f"[A-WYZa-wyz](?:{ldh}{{0,{n - 2}}}{alnum})?|[0-9](?:{ldh}{{0,{n - 2}}})?[A-Za-z]"
    else:
        first = f"[A-WYZa-wyz0-9](?:{ldh}{{0,{n - 2}}}{alnum})?"
    return (
        "(?:"
        f"{first}"  # not x
        "|[Xx]"
        f"|[Xx][A-MO-Za-mo-z0-9](?:{ldh}{{0,{n - 3}}}{alnum})?"  # x, not n
        f"|[Xx]-{ldh}{{0,{n - 3}}}{alnum}"
        "|[Xx][Nn]"
        f"|[Xx][Nn]{alnum}(?:{ldh}{{0,{n - 4}}}{alnum})?"  # xn, not -
        f"|[Xx][Nn]-{alnum}(?:{ldh}{{0,{n - 5}}}{alnum})?"  # xn-, not -
        ")"
    )


#: RFC 1123 host names within 253 characters without counting them: a first label of up to 63
#: characters (the longest DNS allows), then up to 6 labels of up to 30 (63 + 6 x 31 = 249)
_HOSTNAME = (
    f"(?:{_ldh_label(63, last=True)}"
    f"|{_ldh_label(63)}\\.(?:{_ldh_label(30)}\\.){{0,5}}{_ldh_label(30, last=True)})"
)
_IDN_LABEL = "[A-Za-z0-9]{1,30}"
_IDN_HOSTNAME = f"(?:{_IDN_LABEL}\\.){{0,7}}[A-Za-z][A-Za-z0-9]{{0,29}}"
_ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
# RFC 5321 section 4.1.2: a Quoted-string local part (qtextSMTP or a backslash pair)
_QUOTED_LOCAL = '"(?:[\\x20\\x21\\x23-\\x5b\\x5d-\\x7e]|\\\\[\\x20-\\x7e])*"'
_EMAIL = (
    f"(?:{_ATEXT}+(?:\\.{_ATEXT}+)*|{_QUOTED_LOCAL})@"
    f"(?:{_HOSTNAME}|\\[{_IPV4}\\]|\\[IPv6:{_IPV6}\\])"
)
_IDN_EMAIL = f"{_ATEXT}+(?:\\.{_ATEXT}+)*@{_IDN_HOSTNAME}"
_UUID = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
# RFC 3986
_UNRESERVED = "A-Za-z0-9._~\\-"
_SUB_DELIMS = "!$&'()*+,;="
_PCT = f"%{_HEX}{_HEX}"
_IPVFUTURE = f"[Vv]{_HEX}+\\.[{_UNRESERVED}{_SUB_DELIMS}:]+"
_SCHEME = "[A-Za-z][A-Za-z0-9+.-]*"
# RFC 3987: the IRI grammar is RFC 3986's with ``ucschar`` among the unreserved characters
# and ``iprivate`` in the query (IPvFuture and the scheme stay ASCII)
_UCSCHAR = (
    "\\u00A0-\\uD7FF\\uF900-\\uFDCF\\uFDF0-\\uFFEF"
    + "".join(f"\\U000{p:X}0000-\\U000{p:X}FFFD" for p in range(1, 14))
    + "\\U000E1000-\\U000EFFFD"
)
_IPRIVATE = "\\uE000-\\uF8FF\\U000F0000-\\U000FFFFD\\U00100000-\\U0010FFFD"


def _resource(unreserved: str, private: str) -> tuple[str, str]:
    """``(URI, URI-reference)`` of RFC 3986 (``unreserved`` ASCII, no ``private``) or of RFC
    3987 (``IRI``, ``IRI-reference``: ``ucschar`` added to ``unreserved``, ``iprivate`` in
    the query only)."""
    pchar = f"(?:[{unreserved}{_SUB_DELIMS}:@]|{_PCT})"
    segment = f"{pchar}*"
    segment_nz = f"{pchar}+"
    segment_nz_nc = f"(?:[{unreserved}{_SUB_DELIMS}@]|{_PCT})+"
    userinfo = f"(?:[{unreserved}{_SUB_DELIMS}:]|{_PCT})*"
    reg_name = f"(?:[{unreserved}{_SUB_DELIMS}]|{_PCT})*"
    host = f"(?:\\[(?:{_IPV6}|{_IPVFUTURE})\\]|{reg_name})"
    authority = f"(?:{userinfo}@)?{host}(?::[0-9]*)?"
    path_abempty = f"(?:/{segment})*"
    path_absolute = f"/(?:{segment_nz}(?:/{segment})*)?"
    path_rootless = f"{segment_nz}(?:/{segment})*"
    path_noscheme = f"{segment_nz_nc}(?:/{segment})*"
    query = f"(?:{pchar}|[/?{private}])*"
    fragment = f"(?:{pchar}|[/?])*"
    hier = f"(?://{authority}{path_abempty}|{path_absolute}|{path_rootless}|)"
    tail = f"(?:\\?{query})?(?:#{fragment})?"
    uri = f"{_SCHEME}:{hier}{tail}"
    relative = f"(?://{authority}{path_abempty}|{path_absolute}|{path_noscheme}|){tail}"
    return uri, f"(?:{uri}|{relative})"


_URI, _URI_REFERENCE = _resource(_UNRESERVED, "")
_IRI, _IRI_REFERENCE = _resource(_UNRESERVED + _UCSCHAR, _IPRIVATE)
_JSON_POINTER = "(?:/(?:[^/~]|~[01])*)*"
_REL_JSON_POINTER = f"(?:0|[1-9][0-9]*)(?:#|{_JSON_POINTER})"
# RFC 6570 level 4
_VARCHAR = f"(?:[A-Za-z0-9_]|{_PCT})"
_VARSPEC = f"{_VARCHAR}(?:\\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\\*)?"
_EXPRESSION = f"\\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\\}}"
_TEMPLATE_LITERAL = (
    "(?:[\\x21\\x23\\x24\\x26\\x28-\\x3B\\x3D\\x3F-\\x5B\\x5D\\x5F\\x61-\\x7A\\x7E"
    f"\\u00A0-\\uD7FF\\uE000-\\uFFFD\\U00010000-\\U0010FFFF]|{_PCT})"
)
_URI_TEMPLATE = f"(?:{_TEMPLATE_LITERAL}|{_EXPRESSION})*"
_URL = f"https?://{_HOSTNAME}(?::[1-9][0-9]{{0,3}})?(?:/[A-Za-z0-9._~-]*)*"
# a regex made of literal characters (metacharacters escaped) matches itself: always valid
_REGEX = "(?:[^\\\\^$.|?*+()\\[\\]{}\\x00-\\x1f]|\\\\[\\\\^$.|?*+()\\[\\]{}/])*"
_BASE64 = "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"

_SPECS = [
    FormatSpec(
        "date-time",
        f"{_DATE}[Tt]{_TIME}",
        False,
        "RFC 3339, `T`/`t` and `Z`/`z`; leap seconds in UTC form (`23:59:60Z`, `+00:00`, "
        "`-00:00`, any date); a leap second written with another offset (`15:59:60-08:00`) is "
        "not accepted: those would multiply the automaton of every date-time by 3 to 200",
    ),
    FormatSpec(
        "date",
        _DATE,
        True,
        "RFC 3339 full-date, month lengths and leap years checked; years 0001-9999 (year 0000 "
        "is in the RFC's grammar but in no validator's calendar)",
    ),
    FormatSpec(
        "time",
        _TIME,
        False,
        "RFC 3339 full-time, `Z`/`z`; leap seconds as in `date-time` (UTC form only)",
    ),
    FormatSpec("duration", _DURATION, True, "RFC 3339 appendix A (ISO 8601 durations)"),
    FormatSpec(
        "email",
        _EMAIL,
        False,
        "RFC 5321: a dot-atom or quoted-string local part @ a host name of the `hostname` "
        "subset, an IPv4 literal `[127.0.0.1]` or an IPv6 literal `[IPv6:::1]` (no "
        "General-address-literal, no A-labels)",
    ),
    FormatSpec("idn-email", _IDN_EMAIL, False, "ASCII subset of the email format"),
    FormatSpec(
        "hostname",
        _HOSTNAME,
        False,
        "RFC 1123 labels of letters, digits and hyphens (not first or last; a digit may come "
        "first): a first label of up to 63 characters, then up to 6 of up to 30 (within 253 "
        "characters without counting them); the last label not all digits (RFC 3696), and "
        "ending with a letter when it starts with a digit; no "
        "label starting with `xn--` (any case): A-labels (Punycode IDNs, valid or not) are "
        "rejected, because their IDNA2008 rules (the Punycode decodes, the U-label's code "
        "points and contexts are valid) are not enforced",
    ),
    FormatSpec(
        "idn-hostname",
        _IDN_HOSTNAME,
        False,
        "ASCII letters and digits only (no hyphens, so no A-labels)",
    ),
    FormatSpec("ipv4", _IPV4, True, "dotted quad, no leading zeros"),
    FormatSpec("ipv6", _IPV6, False, "RFC 4291 text forms; no zone index"),
    FormatSpec("uuid", _UUID, True, "RFC 4122 8-4-4-4-12 hexadecimal"),
    FormatSpec("uri", _URI, True, "RFC 3986 URI (IPv6 and IPvFuture literals)"),
    FormatSpec(
        "uri-reference",
        _URI_REFERENCE,
        True,
        "RFC 3986 URI-reference (IPv6 and IPvFuture literals)",
    ),
    FormatSpec("iri", _IRI, True, "RFC 3987 IRI (IPv6 and IPvFuture literals)"),
    FormatSpec(
        "iri-reference",
        _IRI_REFERENCE,
        True,
        "RFC 3987 IRI-reference (IPv6 and IPvFuture literals)",
    ),
    FormatSpec("uri-template", _URI_TEMPLATE, True, "RFC 6570 (level 4)"),
    FormatSpec("json-pointer", _JSON_POINTER, True, "RFC 6901"),
    FormatSpec(
        "relative-json-pointer", _REL_JSON_POINTER, True, "draft-handrews-relative-json-pointer"
    ),
    FormatSpec("byte", _BASE64, True, "OpenAPI: base64 with padding (RFC 4648)"),
    FormatSpec(
        "regex",
        _REGEX,
        False,
        "ECMA 262 regexes made of literal characters and escaped metacharacters",
    ),
    FormatSpec(
        "url",
        _URL,
        False,
        "not a JSON Schema format: http(s)://hostname[:port][/path] only, valid under every "
        "common `url` definition",
    ),
]

#: The supported formats by name.
FORMATS: dict[str, FormatSpec] = {s.name: s for s in _SPECS}

#: Formats that never constrain a string (OpenAPI annotations): any string is generated.
ANNOTATION_FORMATS: dict[str, str] = {
    "password": "OpenAPI UI hint; any string",
    "binary": "OpenAPI: any string",
}

#: Formats that constrain numbers (OpenAPI): the integer range applied to integers.
NUMBER_FORMATS: dict[str, tuple[int, int]] = {
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@metered_cache(1024)
def format_node(name: str) -> Node | None:
    """The IR (decoded strings) of a known format; None for an unknown one."""
    spec = FORMATS.get(name)
    if spec is not None:
        return parse_regex(spec.regex, dialect="python")
    if name in ANNOTATION_FORMATS:
        return repeat(ANY_CHAR, 0, None)
    return None
