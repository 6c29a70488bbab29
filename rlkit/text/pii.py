"""PII scrubbing: e-mails, phone numbers, ID and order numbers, and URLs carrying secrets become typed placeholders.

Each kind is a list of regular expressions, most with an extra check on the match (digit count, checksum, not
part of arithmetic). The rules favour missing an odd format over eating numbers: training prompts are full of
arithmetic, and a scrubbed ``123456789 * 987654321`` ruins a math prompt. So a bare run of digits is never scrubbed
on its length alone; it needs a format (a phone layout, an SSN, a checksummed Chinese resident ID, a Luhn-valid
grouped card number) or a keyword before it (``ID``, ``passport``, ``order #``, ``订单号``, ``phone:`` ...).
Kinds run in the order of ``KINDS``: a URL holds e-mail-like and digit-like parts, an order or ID after its
keyword would otherwise be read as a phone number.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

KINDS = ("url", "email", "order", "id", "phone")
PLACEHOLDERS = {kind: f"[{kind.upper()}]" for kind in KINDS}
ARITHMETIC = set("=+-*/×÷^<>%")
# a keyword-led value: 5+ letters, digits or dashes with at least one digit ("A123-4567", "20231105887766")
_VALUE = r"(?P<value>(?=[A-Za-z0-9-]*\d)[A-Za-z0-9][A-Za-z0-9-]{3,}[A-Za-z0-9])"
_LEAD = r"\s*(?:#|no\.?|num(?:ber)?|id)?\s*(?:is|was)?\s*[:：#]?\s*#?\s*"  # "number is: #"
_END = r"(?!\w|[.,/-]\d)"  # a number ends here: no word character and no separator going on to a digit
_MARKED_LEAD = r"\s*(?:(?:#|no\.?|num(?:ber)?|id)\s*(?:is|was)?\s*[:：]?|[:：])\s*#?\s*"  # a marker is required


def _digits(text: str) -> int:
    return sum(c.isdigit() for c in text)


def _not_arithmetic(match: re.Match[str]) -> bool:
    """False when an arithmetic operator sits right beside the match (``800-555-1234 = ?`` is a sum, not a phone)."""
    text = match.string
    before = text[:match.start()].rstrip()[-1:]
    after = text[match.end():].lstrip()[:1]
    return before not in ARITHMETIC and after not in ARITHMETIC


def _not_round(match: re.Match[str]) -> bool:
    # "14000000000 people" is a quantity; real phone numbers rarely end in five zeros
    return not re.sub(r"\D", "", match.group(0)).endswith("00000")


def _phone_digits(low: int, high: int) -> Callable[[re.Match[str]], bool]:
    return lambda m: low <= _digits(m.group("value") if "value" in m.re.groupindex else m.group(0)) <= high


def _luhn(match: re.Match[str]) -> bool:
    """Payment-card numbers carry the Luhn check digit; random digit groups pass only one time in ten."""
    digits = [int(c) for c in re.sub(r"\D", "", match.group(0))][::-1]
    total = sum(d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2) for i, d in enumerate(digits))
    return total % 10 == 0


def _cn_resident_id(match: re.Match[str]) -> bool:
    """GB 11643: a plausible birth date in digits 7-14 and the ISO 7064 MOD 11-2 check character last."""
    value = match.group(0).upper()
    year, month, day = int(value[6:10]), int(value[10:12]), int(value[12:14])
    if not (1900 <= year <= 2099 and 1 <= month <= 12 and 1 <= day <= 31):
        return False
    weights = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
    check = "10X98765432"[sum(int(c) * w for c, w in zip(value[:17], weights, strict=True)) % 11]
    return value[17] == check


_SECRET_PARAM_WORDS = ("token", "secret", "session", "sessid", "signature", "password", "passwd", "apikey",
                       "api_key", "api-key", "credential", "jwt", "auth")
_SECRET_PARAM_NAMES = {"key", "sig", "sid", "pwd", "code", "state"}


def _secret_url(match: re.Match[str]) -> bool:
    """A URL whose query or fragment names a token, key, session or signature, or with a password in it."""
    try:
        parts = urlsplit(match.group(0))
    except ValueError:
        return False
    if parts.password:
        return True
    for name, _ in parse_qsl(f"{parts.query}&{parts.fragment}", keep_blank_values=True):
        name = name.lower()
        if name in _SECRET_PARAM_NAMES or name.endswith(("_key", "-key", ".key")) or \
                any(word in name for word in _SECRET_PARAM_WORDS):
            return True
    return False


@dataclass(frozen=True)
class PiiRule:
    """One pattern of one kind; ``check`` vets a match, and only the ``value`` group (if any) is replaced."""

    kind: str
    pattern: re.Pattern[str]
    check: Callable[[re.Match[str]], bool] | None = None


def _rule(kind: str, pattern: str, check: Callable[[re.Match[str]], bool] | None = None, flags: int = 0) -> PiiRule:
    return PiiRule(kind, re.compile(pattern, flags), check)


RULES: tuple[PiiRule, ...] = (
    # http(s)/ftp URLs, ending before trailing punctuation; replaced whole when they carry a secret
    _rule("url", r"\b(?:https?|ftp)://[^\s<>\"'`]*[^\s<>\"'`.,;:!?)\]}]", _secret_url, re.IGNORECASE),
    _rule("email", r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}\b"),
    # "order #A123-4567", "Order No. 88123", "order number is 5512-99", "tracking number: 1Z999AA1", "订单号：2023…"
    _rule("order", rf"\b(?:order|tracking|shipment|invoice){_MARKED_LEAD}{_VALUE}", None, re.IGNORECASE),
    _rule("order", rf"(?:订单|运单|快递单)(?:号|编号)?\s*(?:是|为)?\s*[:：]?\s*{_VALUE}"),
    # "ID: 4455-9812", "passport no. X1234567", "SSN 123-45-6789", "customer number 889123", "身份证号 …"
    _rule("id", rf"(?:\b(?:id|ssn|passport|licen[cs]e|social security|national (?:id|insurance)|identity card|"
                rf"user ?id|iban){_LEAD}|"
                rf"\b(?:customer|client|member(?:ship)?|employee|patient|account){_MARKED_LEAD}|"
                rf"(?:身份证|护照|账号|账户|工号|会员号|学号)(?:号码?)?\s*(?:是|为)?\s*[:：]?\s*){_VALUE}",
          None, re.IGNORECASE),
    _rule("id", r"(?<![\w-])\d{3}-\d{2}-\d{4}(?![\w-])", _not_arithmetic),  # US social security number
    _rule("id", r"(?<!\w)\d{17}[\dXx](?!\w)", _cn_resident_id),  # Chinese resident ID, checksummed
    _rule("id", r"(?<![\w-])\d{4}(?:[ -]\d{4}){3}(?![\w-])|(?<![\w-])\d{4}[ -]\d{6}[ -]\d{5}(?![\w-])",
          lambda m: _luhn(m) and _not_arithmetic(m)),  # payment cards as written: 4-4-4-4 or Amex 4-6-5
    # after a keyword: any 7-15 digits ("phone: 555-1234", "电话：010 8888 6666")
    _rule("phone", r"(?:\b(?:phone|tel|telephone|mobile|cell|fax|whatsapp)(?:\s*(?:number|no\.?|#))?\s*(?:is)?"
                   r"\s*[:：]?|(?:电话|手机|手机号|联系电话)(?:号码)?\s*(?:是|为)?\s*[:：]?)\s*"
                   r"(?P<value>\+?\d[\d ().-]{5,}\d)", _phone_digits(7, 15), re.IGNORECASE),
    # international: "+" then 8-15 digits with single spaces, dots, dashes or brackets between ("+44 20 7946 0958")
    _rule("phone", r"(?<![\w+])\+\d(?:[ .()-]{0,2}\d){7,14}(?!\d)",
          lambda m: _phone_digits(8, 15)(m) and _not_arithmetic(m)),
    # North American: "(555) 123-4567", "555-123-4567", "555.123.4567", "1-800-555-1234"
    _rule("phone", r"(?<![\w+.-])(?:1[ .-])?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}" + _END, _not_arithmetic),
    # Chinese mobiles: "13812345678", "138 1234 5678", "+86 138-1234-5678" (the +86 form is matched above)
    _rule("phone", r"(?<![\w+.-])1[3-9]\d(?:[ -]?\d{4}){2}" + _END, lambda m: _not_round(m) and _not_arithmetic(m)),
    # European national forms with a trunk 0: "030 1234567", "06 12 34 56 78", "0612345678" (9-12 digits)
    _rule("phone", r"(?<![\w+.,-])0\d{1,4}(?:[ ./-]?\d{2,4}){2,5}" + _END,
          lambda m: _phone_digits(9, 12)(m) and _not_round(m) and _not_arithmetic(m)),
)


def scrub_text(text: str, counts: Counter[str] | None = None) -> tuple[str, Counter[str]]:
    """``text`` with every PII match replaced by its kind's placeholder, and the replacements per kind."""
    counts = Counter() if counts is None else counts
    for rule in RULES:
        if rule.kind == "url" and "://" not in text or rule.kind == "email" and "@" not in text:
            continue  # most texts have neither; skip the scan

        def replace(match: re.Match[str], rule: PiiRule = rule) -> str:
            if rule.check is not None and not rule.check(match):
                return match.group(0)
            counts[rule.kind] += 1
            if "value" not in rule.pattern.groupindex:
                return PLACEHOLDERS[rule.kind]
            start, end = match.span("value")
            whole = match.group(0)
            # keep the keyword ("order #[ORDER]"): the text still reads, and says what was there
            return whole[:start - match.start()] + PLACEHOLDERS[rule.kind] + whole[end - match.start():]

        text = rule.pattern.sub(replace, text)
    return text, counts


def scrub_value(value: Any, counts: Counter[str] | None = None) -> tuple[Any, Counter[str]]:
    """Every string inside ``value`` (nested lists and dicts, e.g. chat messages) scrubbed; keys are left alone."""
    counts = Counter() if counts is None else counts
    if isinstance(value, str):
        return scrub_text(value, counts)[0], counts
    if isinstance(value, list):
        return [scrub_value(v, counts)[0] for v in value], counts
    if isinstance(value, dict):
        return {k: scrub_value(v, counts)[0] for k, v in value.items()}, counts
    return value, counts
