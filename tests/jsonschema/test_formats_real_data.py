"""The formats real data uses (#29 item 7): leap seconds and lower-case ``t``/``z`` in
``date-time``/``time``, quoted local parts and IP literals in ``email``, RFC 1123 ``hostname``
labels (a digit first, up to 63 characters), IPvFuture hosts in ``uri``.

Oracles: brute force over every leap-second time (the rule of the JSON-Schema-Test-Suite:
``hh:mm:60`` is valid when the time minus its offset is 23:59 UTC); every label length; the
suite's ``optional/format`` cases through formcast's IR of each format (charfa automaton) and
through its Python regex; jsonschema's ``date-time`` checker on times without a leap second.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import pytest

import jsonschema
from formcast.automata import charfa
from formcast.frontends.jsonschema import formats as F

SUITE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "JSON-Schema-Test-Suite"
TOUCHED = ("date-time", "time", "email", "hostname", "uri", "uri-reference")


def _rx(name: str) -> re.Pattern[str]:
    return re.compile(F.FORMATS[name].regex)


def test_every_leap_second_time() -> None:
    """All 1,440 local minutes x every offset of 00/15/20/30/45/59 minutes x both signs: a leap
    second is never accepted at another minute than 23:59 UTC, and always in its UTC forms."""
    time_rx = _rx("time")
    for local, oh, om, sign in itertools.product(
        range(1440), range(24), (0, 15, 20, 30, 45, 59), (1, -1)
    ):
        h, m = divmod(local, 60)
        text = f"{h:02d}:{m:02d}:60{'+' if sign > 0 else '-'}{oh:02d}:{om:02d}"
        utc = (local - sign * (oh * 60 + om)) % 1440
        valid = utc == 23 * 60 + 59
        ours = time_rx.fullmatch(text) is not None
        if ours:
            assert valid, text
        elif oh == om == 0:
            assert not valid, text  # exact for the UTC forms
    for text, valid in [
        ("23:59:60Z", True),
        ("23:59:60z", True),
        ("23:59:60.5Z", True),
        ("22:59:60Z", False),
        ("23:58:60Z", False),
        ("23:59:61Z", False),
    ]:
        assert (time_rx.fullmatch(text) is not None) is valid, text


def test_lower_case_t_and_z() -> None:
    dt = _rx("date-time")
    for text in ["1963-06-19t08:30:06.283185z", "1963-06-19T08:30:06z", "1998-12-31t23:59:60z"]:
        assert dt.fullmatch(text), text
    assert not dt.fullmatch("1963-06-19 08:30:06Z")
    assert not dt.fullmatch("1963-06-19x08:30:06Z")


def test_date_time_agrees_with_jsonschema_without_leap_seconds() -> None:
    """jsonschema's checker (rfc3339-validator, which knows no leap second) as the oracle."""
    pytest.importorskip("rfc3339_validator")
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    dt = _rx("date-time")
    rng = random.Random(29)
    for _ in range(3000):
        y = rng.choice(["1999", "2000", "2024", "1900", "0001", "0000", "2023"])
        mo, d = rng.randrange(0, 14), rng.randrange(0, 33)
        hh, mm, ss = rng.randrange(0, 26), rng.randrange(0, 61), rng.randrange(0, 60)
        frac = rng.choice(["", ".5", ".123456"])
        tz = rng.choice(["Z", "z", "+01:00", "-23:59", "+24:00", "-00:60", ""])
        t = rng.choice("Tt")
        text = f"{y}-{mo:02d}-{d:02d}{t}{hh:02d}:{mm:02d}:{ss:02d}{frac}{tz}"
        assert (dt.fullmatch(text) is not None) is checker.conforms(text, "date-time"), text


def test_hostname_label_lengths() -> None:
    host = _rx("hostname")
    for n in range(1, 70):
        for first in "a1":
            label = first + "b" * (n - 1)
            assert (host.fullmatch(f"{label}.com") is not None) is (n <= 63), n
            alone = n <= 63 and not label.isdigit()  # "1": an all-numeric top label
            assert (host.fullmatch(label) is not None) is alone, n
    assert host.fullmatch("1host")
    assert host.fullmatch("a--b.com")
    assert host.fullmatch("123.example")
    assert not host.fullmatch("example.123")  # an all-numeric top label (RFC 3696)
    assert not host.fullmatch("-a.com")
    assert not host.fullmatch("a-.com")
    assert not host.fullmatch("xn--9n2bp8q.com")  # A-labels: Punycode is not checked
    long4 = ".".join(["a" * 63] * 4)
    assert not host.fullmatch(long4)  # 255 characters: beyond 253
    # the subset: a first label of up to 63, then up to 6 of up to 30 (a longer valid name is
    # not generated); a digit-first top label ends with a letter
    assert host.fullmatch("a" * 63 + "." + ".".join(["b" * 30] * 6))
    assert not host.fullmatch(".".join(["a" * 30] * 8))
    assert not host.fullmatch("a." + "b" * 31)
    assert host.fullmatch("1a.1b")
    assert not host.fullmatch("a.1b2")


def test_email_quoted_local_parts_and_ip_literals() -> None:
    email = _rx("email")
    for text in [
        '"joe bloggs"@example.com',
        '"joe..bloggs"@example.com',
        '"joe@bloggs"@example.com',
        '"a\\"b"@example.com',
        '""@example.com',
        "joe.bloggs@[127.0.0.1]",
        "joe.bloggs@[IPv6:::1]",
        "joe.bloggs@[IPv6:2001:db8::7]",
        "1x@1host.com",
    ]:
        assert email.fullmatch(text), text
    for text in [
        '"joe"bloggs"@example.com',
        '"joe\\"@example.com',
        "joe.bloggs@[127.0.0.300]",
        "joe.bloggs@[::1]",
        "joe.bloggs@[IPv6:1:2]",
        'joe."b"@example.com',
        '"\x01"@example.com',
    ]:
        assert not email.fullmatch(text), text


def test_uri_ipvfuture() -> None:
    uri = _rx("uri")
    for text in ["http://[v1.fe80::a+en1]/x", "http://[V7.a:b]", "ldap://[2001:db8::7]/c=GB"]:
        assert uri.fullmatch(text), text
    for text in ["http://[v.x]/", "http://[vZ.x]/", "http://[v1.]/", "http://[v1.a/b]/"]:
        assert not uri.fullmatch(text), text


def _suite_cases() -> list[tuple[str, str, bool, str]]:
    if not SUITE.is_dir():
        return []
    out = []
    for path in sorted(SUITE.glob("tests/*/optional/format/*.json")):
        for group in json.loads(path.read_text()):
            fmt = group["schema"].get("format")
            if fmt not in TOUCHED:
                continue
            for case in group["tests"]:
                if isinstance(case["data"], str):
                    out.append((fmt, case["data"], case["valid"], str(path.relative_to(SUITE))))
    return out


def test_suite_cases_through_the_ir() -> None:
    """Every suite case of the six formats, by formcast's IR (the automaton the grammar is built
    from) and by the regex: both agree with the suite except on A-labels (docs/json_schema.md:
    Punycode is not checked)."""
    cases = _suite_cases()
    if not cases:
        pytest.skip(f"JSON-Schema-Test-Suite not found at {SUITE}")
    dfas = {}
    for name in TOUCHED:
        node = F.format_node(name)
        assert node is not None
        dfas[name] = charfa.dfa_from_node(node)
    for fmt, text, valid, where in cases:
        ours = dfas[fmt].matches(text)
        assert ours is (_rx(fmt).fullmatch(text) is not None), (fmt, text)
        if fmt == "hostname" and text.lower().startswith("xn--"):
            assert not ours, (where, text)
            continue
        if ours or not _leap_second_with_offset(fmt, text):
            assert ours is valid, (where, fmt, text)


def _leap_second_with_offset(fmt: str, text: str) -> bool:
    """A leap second written with an offset other than 00:00: not accepted (the subset)."""
    leap = re.search(r":60(\.[0-9]+)?[+-](?!00:00)", text)
    return fmt in ("time", "date-time") and leap is not None
