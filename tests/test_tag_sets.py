"""Tag sets: the scheme detected, the classes a sample counts, the label list a model gets."""

import pytest

from dwatt.data.files import DataFormatError
from dwatt.data.tag_sets import describe, entity_types, label_list, mentions, refuse_bilou, scheme_of


@pytest.mark.parametrize(
    "tags, scheme",
    [
        (["O", "B-PER", "I-PER"], "IOB2"),
        (["B-FOOD", "O", "S-DRUG", "E-FOOD"], "IOBES"),
        (["NOUN", "VERB", "DET"], "plain"),
        (["O", "PER", "LOC"], "plain"),  # types without prefixes: one class per token
        (["O", "B-PER", "PER"], "plain"),  # a mix is read as plain tags, never half as spans
        (["O"], "plain"),
    ],
)
def test_the_scheme_is_read_from_the_tags(tags, scheme):
    assert scheme_of(tags) == scheme


def test_the_classes_a_sample_counts_are_the_datas_own():
    assert entity_types(["O", "B-FOOD", "I-FOOD", "B-DRUG", "I-DRUG"]) == ["FOOD", "DRUG"]
    assert entity_types(["NOUN", "O", "VERB"]) == ["NOUN", "VERB"]
    assert mentions(["B-FOOD", "I-FOOD", "S-DRUG", "O"], "IOBES") == {"FOOD", "DRUG"}
    assert mentions(["NOUN", "O"], "plain") == {"NOUN"}


def test_the_label_list_gives_every_prefix_of_a_seen_type_an_id():
    assert label_list(["B-FOOD", "O", "S-DRUG", "B-FOOD"]) == [
        "O",
        "B-FOOD",
        "I-FOOD",
        "E-FOOD",
        "S-FOOD",
        "B-DRUG",
        "I-DRUG",
        "E-DRUG",
        "S-DRUG",
    ]
    assert label_list(["B-X"]) == ["O", "B-X", "I-X"]
    assert label_list(["VERB", "NOUN", "VERB"]) == ["VERB", "NOUN"]
    assert describe(["O", "B-FOOD", "I-FOOD"]) == "IOB2 spans of 1 type (FOOD), scored by seqeval"
    assert describe(["NOUN", "VERB"]) == "plain tags, 2 besides O (NOUN, VERB), scored per token"


def test_bilou_is_refused_with_its_renaming():
    refuse_bilou(["B-X", "E-X"], "f:1")
    with pytest.raises(DataFormatError, match=r"f:3: tag 'L-X' is BILOU; rename L- to E- and U- to S-"):
        refuse_bilou(["B-X", "L-X"], "f:3")
