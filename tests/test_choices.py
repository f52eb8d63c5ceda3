"""The command line's choices and the fusions' facts (dwatt.choices), read without torch: the same names and facts as
the fusions' table and the configuration's poolings."""

from dataclasses import fields

import configuration_dwatt
from dwatt import choices
from fusions_dwatt import FUSION_CLASSES


def test_the_command_line_s_choices_mirror_the_configuration_s():
    assert (choices.FUSIONS, choices.POOLINGS) == (configuration_dwatt.FUSIONS, configuration_dwatt.POOLINGS)
    assert choices.FUSIONS == tuple(FUSION_CLASSES)


def test_the_fusions_facts_are_their_classes_own():
    for name, facts in choices.FUSION_FACTS.items():
        for fact in fields(facts):
            assert getattr(facts, fact.name) == getattr(FUSION_CLASSES[name], fact.name), (name, fact.name)
