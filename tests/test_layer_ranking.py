"""`rank_layers` on tiny random backbones: every layer measured, the same texts and values for the same seed, the
budget refused up front."""

import json

import pytest

from dwatt.data.files import DataFormatError
from dwatt.layer_measures import MEASURES
from dwatt.layer_ranking import LayerRanking, rank_layers, sampled


def test_every_measure_is_computed_on_every_layer_of_an_encoder_and_the_same_seed_gives_the_same_values(
    tiny_backbone, tiny_conll
):
    ranking = rank_layers(str(tiny_backbone), data_dir=str(tiny_conll), texts=12, seed=3, batch_size=5)
    again = rank_layers(str(tiny_backbone), data_dir=str(tiny_conll), texts=12, seed=3, batch_size=12)
    assert ranking.layers == [0, 1, 2, 3]
    assert set(ranking.values) == set(MEASURES)
    assert ranking.texts == 12
    for name, by_layer in ranking.values.items():
        assert by_layer == pytest.approx(again.values[name], rel=1e-5, nan_ok=True)  # batching changes nothing
    assert all(pick in (1, 2, 3) for pick in ranking.picks().values())  # never the embedding output
    assert ranking.dataset == tiny_conll.name  # a folder of one's own is called by its name
    read_back = LayerRanking.from_json(json.loads(json.dumps(ranking.as_json())))
    for name, by_layer in ranking.values.items():
        assert read_back.values[name] == pytest.approx(by_layer, nan_ok=True)


def test_a_decoders_texts_are_read_without_padding_and_classification_texts_are_ranked_too(tiny_decoder, tiny_topics):
    ranking = rank_layers(str(tiny_decoder), task="cls", data_dir=str(tiny_topics), texts=7, batch_size=3)
    alone = rank_layers(str(tiny_decoder), task="cls", data_dir=str(tiny_topics), texts=7, batch_size=1)
    assert ranking.layers == [0, 1, 2, 3]
    assert ranking.tokens == alone.tokens
    # padding (right, with the end-of-text token) is left out: a text batched with longer ones reads the same
    assert ranking.values["prompt_entropy"] == pytest.approx(alone.values["prompt_entropy"], rel=1e-4)
    assert ranking.dataset == tiny_topics.name


def test_the_texts_drawn_depend_on_the_seed_alone():
    texts = [f"text {i}" for i in range(50)]
    assert sampled(texts, 10, 0) == sampled(texts, 10, 0) != sampled(texts, 10, 1)
    assert sampled(texts, 80, 0) == texts


def test_a_budget_too_small_is_refused_before_the_pass(tiny_backbone, tiny_conll):
    with pytest.raises(ValueError, match="--max-memory .* fewer --texts"):
        rank_layers(str(tiny_backbone), data_dir=str(tiny_conll), texts=8, max_memory=1000)


def test_the_masked_lm_has_no_layer_to_rank(tiny_backbone):
    with pytest.raises(ValueError, match="--task mlm"):
        rank_layers(str(tiny_backbone), task="mlm")


def test_a_folder_of_unlabelled_texts_is_ranked_without_a_label_column(tiny_backbone, tmp_path):
    folder = tmp_path / "unlabelled"
    folder.mkdir()
    (folder / "train.csv").write_text(
        "review\n" + "".join(f"peter call brussels {i % 3 * 'lamb '}\n" for i in range(9))
    )
    ranking = rank_layers(str(tiny_backbone), task="cls", data_dir=str(folder), texts=6)
    assert ranking.texts == 6 and ranking.dataset == "unlabelled"
    (folder / "train.csv").write_text("body,label\npeter,a\n")
    with pytest.raises(DataFormatError, match=r"train\.csv: cannot tell which column is the text .* --text-column"):
        rank_layers(str(tiny_backbone), task="cls", data_dir=str(folder), texts=6)
