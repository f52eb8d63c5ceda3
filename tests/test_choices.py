"""The command line's choices (dwatt.choices), read without torch: the same names as the fusions' table and the
configuration's poolings."""

import configuration_dwatt
from dwatt import choices
from fusions_dwatt import FUSION_CLASSES


def test_the_command_line_s_choices_mirror_the_configuration_s():
    assert (choices.FUSIONS, choices.POOLINGS) == (configuration_dwatt.FUSIONS, configuration_dwatt.POOLINGS)
    assert choices.FUSIONS == tuple(FUSION_CLASSES)
