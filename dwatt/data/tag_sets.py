"""Tag sets of token-labelling data: which scheme a set of tags follows, its entity types, and the label list a
model of the data is given.

Three schemes are read: IOB2/BIO spans (`B-X`, `I-X`, `O`), IOBES spans (`B-`, `I-`, `E-`, `S-`, `O`), both scored
by seqeval's entity-level micro-F1; and plain tags, one class per token (part of speech, say, or `PER` without a
prefix), scored per token (`dwatt.metrics.token_scores`). BILOU (`L-`, `U-`) is refused with the renaming that
makes it IOBES. Light: no `datasets`, no tokenizer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .files import DataFormatError

OUTSIDE = "O"
PREFIXES = {"IOB2": ("B", "I"), "IOBES": ("B", "I", "E", "S")}
_SPAN_TAG = re.compile(r"^([BIES])-(.+)$")
_BILOU_TAG = re.compile(r"^[LU]-.+$")


def scheme_of(labels: Sequence[str]) -> str:
    """ "IOB2", "IOBES" or "plain": spans where every tag but `O` carries a B/I(/E/S) prefix, else plain tags."""
    tags = [label for label in labels if label != OUTSIDE]
    matches = [_SPAN_TAG.match(tag) for tag in tags]
    if not tags or not all(matches):
        return "plain"
    return "IOBES" if any(match.group(1) in "ES" for match in matches) else "IOB2"


def entity_types(labels: Sequence[str]) -> list[str]:
    """The classes a few-shot sample counts, in order of first appearance: span types (`PER` of `B-PER`) for
    IOB2/IOBES, every tag but `O` for plain tags."""
    if scheme_of(labels) == "plain":
        return [label for label in dict.fromkeys(labels) if label != OUTSIDE]
    return list(dict.fromkeys(label[2:] for label in labels if label != OUTSIDE))


def mentions(tags: Sequence[str], scheme: str) -> set[str]:
    """The classes one sentence's tags mention: the types of its spans' first tags (`B-`, and `S-` in IOBES), or
    its plain tags but `O`."""
    if scheme == "plain":
        return {tag for tag in tags if tag != OUTSIDE}
    return {tag[2:] for tag in tags if tag[:2] in ("B-", "S-")}


def refuse_bilou(tags: Iterable[str], where: str) -> None:
    """BILOU's `L-`/`U-` tags, refused with the renaming to IOBES (`where`: the file and line)."""
    for tag in tags:
        if _BILOU_TAG.match(tag):
            raise DataFormatError(
                f"{where}: tag {tag!r} is BILOU; rename L- to E- and U- to S- (IOBES, which dwatt scores with seqeval)"
            )


def label_list(tags_in_order: Iterable[str]) -> list[str]:
    """The labels of a model of data whose tags appear in `tags_in_order` (training split first): for spans, `O`
    then every prefix of the scheme for each type in order of first appearance (so that a tag of a known type never
    lacks an id); for plain tags, `O` (where present) then the tags in order of first appearance."""
    seen = list(dict.fromkeys(tags_in_order))
    scheme = scheme_of(seen)
    head = [OUTSIDE] if OUTSIDE in seen or scheme != "plain" else []
    if scheme == "plain":
        return head + [tag for tag in seen if tag != OUTSIDE]
    types = dict.fromkeys(tag[2:] for tag in seen if tag != OUTSIDE)
    return head + [f"{prefix}-{kind}" for kind in types for prefix in PREFIXES[scheme]]


def describe(labels: Sequence[str]) -> str:
    """The tag set in words, as the commands state it: 'IOB2 spans of 3 types (FOOD, DRUG, PRODUCT)'."""
    scheme, kinds = scheme_of(labels), entity_types(labels)
    shown = ", ".join(kinds[:8]) + (", ..." if len(kinds) > 8 else "")
    if scheme == "plain":
        return f"plain tags, {len(kinds)} besides O ({shown}), scored per token"
    return f"{scheme} spans of {len(kinds)} type{'s' if len(kinds) != 1 else ''} ({shown}), scored by seqeval"


__all__ = ["OUTSIDE", "PREFIXES", "describe", "entity_types", "label_list", "mentions", "refuse_bilou", "scheme_of"]
