"""Simulator calibration: behaviour statistics by hand, the distance, the human-turn NLL, and that SFT and DPO
calibration move the simulator toward the 'human' data (on the toy model, seconds)."""
import math
from pathlib import Path

import pytest

from conftest import make_toy_corpus, play_texts
from dialogrl.agents import LMAgent
from dialogrl.calibration import (
    behaviour_distance,
    calibrate_dpo,
    calibrate_sft,
    preference_pairs,
    role_conversations,
    turn_nll,
)
from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import BEHAVIOUR_SCALES, DondScenario, behaviour_stats
from dialogrl.models import load_model
from dialogrl.tokens import assistant_tokens

SC = DondScenario(counts=(1, 2, 3), values=((4, 0, 2), (2, 4, 0)))  # A: book 4, ball 2; B: book 2, hat 4


def test_behaviour_stats_by_hand():
    task = DealOrNoDeal()
    g1 = play_texts(task, SC, ["[propose book=1 hat=0 ball=3]",   # A opens at 4 + 6 = 10
                               "no [propose book=1 hat=2 ball=0]",  # B opens at 2 + 8 = 10 (answers A: no accept)
                               "[propose book=1 hat=0 ball=2]",     # A concedes 10 -> 8
                               "ok [accept]"])                      # B accepts A's standing proposal
    g2 = play_texts(task, SC, ["hello there", "[accept]",            # B: accept with nothing standing (invalid)
                               "[no deal]"])
    a, b = behaviour_stats(task, [g1, g2], "A"), behaviour_stats(task, [g1, g2], "B")
    assert a["opening_demand"] == 10 and a["concession"] == 2
    assert a["acceptance_rate"] == 0.0  # A answered B's proposal once, with a counter-proposal
    assert b["acceptance_rate"] == 0.5 and b["opening_demand"] == 10 and math.isnan(b["concession"])
    assert a["turns"] == b["turns"] == 3.5 and a["agreement"] == b["agreement"] == 0.5
    assert a["words_per_turn"] == 3.0 and b["words_per_turn"] == pytest.approx(8 / 3)  # markers count as words
    d = behaviour_distance(a, b, BEHAVIOUR_SCALES)
    assert "concession" not in d  # NaN on one side: left out
    assert d["acceptance_rate"] == 0.5 and d["opening_demand"] == d["turns"] == d["agreement"] == 0.0
    assert d["words_per_turn"] == pytest.approx(1 / 30) and d["total"] == pytest.approx((0.5 + 1 / 30) / 5)


def test_role_conversations_are_the_roles_views():
    task = DealOrNoDeal()
    g = play_texts(task, SC, ["hi [propose book=1 hat=0 ball=3]", "ok [accept]"])
    conv = role_conversations(task, [g, task.reset(SC)], "B")
    assert len(conv) == 1 and conv[0][-1] == {"role": "assistant", "content": "ok [accept]"}
    assert "book" in conv[0][0]["content"] and conv[0][0]["role"] == "system"


def shifted(n, seed):
    """A 'human' population that answers the toy model's question in another style."""
    return make_toy_corpus(n, seed, answer="i see {k}, all {colour}.")


def test_sft_calibration_lowers_the_human_turn_nll(toy_model_dir, tmp_path):
    train, held_out = shifted(300, 0), shifted(60, 1)
    model, tok = load_model(str(toy_model_dir), device="cpu")
    before = turn_nll(model, tok, held_out)
    assert math.isfinite(before) and before > 0
    sim = calibrate_sft(toy_model_dir, train, tmp_path / "sim", epochs=2, lr=3e-3, seed=0)
    model2, tok2 = load_model(str(sim), device="cpu")
    after = turn_nll(model2, tok2, held_out)
    assert after < 0.5 * before, (before, after)
    assert (sim / "calibration.json").exists()


def test_dpo_prefers_the_human_turn(toy_model_dir, tmp_path):
    model, tok = load_model(str(toy_model_dir), device="cpu")
    simulator = LMAgent(model, tok, max_new_tokens=12)
    pairs = preference_pairs(shifted(64, 2), simulator)
    assert pairs and all(p.prompt[-1]["role"] == "user" and p.chosen.startswith("i see") for p in pairs)
    held_out = shifted(40, 3)
    before = turn_nll(model, tok, held_out)
    out = calibrate_dpo(toy_model_dir, pairs, tmp_path / "dpo", beta=0.1, lr=2e-3, epochs=3, batch_size=16)
    model2, tok2 = load_model(str(out), device="cpu")
    assert turn_nll(model2, tok2, held_out) < before  # the human style became more likely


# The chat templates of the hub models a gpu profile may name, as the hub ships them (TRL keeps byte-exact copies,
# offline), and SmolLM2's ChatML without the markers dialogrl.packaged adds: none marks the assistant's tokens.
HUB_TEMPLATES = ["qwen2_5", "qwen3", "llama3", "llama3_1", "llama3_2", "gemma", "gemma3", "phi3", "smollm2"]
TALK = [{"role": "user", "content": "how many red balls? there are 3."},
        {"role": "assistant", "content": "3 red balls."},
        {"role": "user", "content": "and blue? there are 4."},
        {"role": "assistant", "content": "4 blue balls."}]


def hub_template(name: str) -> str:
    if name == "smollm2":
        from dialogrl.packaged import CHATML_GENERATION

        return CHATML_GENERATION.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()


@pytest.fixture(scope="module")
def hub_tok(toy_model_dir):
    """The toy model's tokenizer, to be given a hub model's chat template (with a bos token, which Llama's use)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(toy_model_dir))
    tok.bos_token = tok.eos_token
    return tok


@pytest.mark.parametrize("name", HUB_TEMPLATES)
def test_the_assistant_tokens_of_a_hub_template(hub_tok, name):
    """turn_nll scores exactly the assistant's messages on the hub's own templates, which have no {% generation %}
    markers: the text each message adds after the generation prompt (Qwen3's: TRL's training version, which adds the
    empty thinking block to every turn)."""
    hub_tok.chat_template = hub_template(name)
    ids, mask = assistant_tokens(hub_tok, TALK)
    said = hub_tok.decode([i for i, m in zip(ids, mask) if m])
    assert "3 red balls." in said and "4 blue balls." in said
    assert "how many" not in said and "and blue" not in said and "user" not in said
    assert len(ids) == len(mask) and 0 < sum(mask) < len(mask)
    if name != "qwen3":   # what the model writes after the generation prompt, not the prompt's newline
        assert said.startswith("3 red balls.")


def test_turn_nll_on_a_hub_template_and_the_template_it_cannot_read(toy_model_dir, hub_tok):
    from dialogrl.packaged import CHATML_GENERATION

    model, _ = load_model(str(toy_model_dir), device="cpu")
    hub_tok.chat_template = CHATML_GENERATION         # SmolLM2's template as dialogrl.packaged marks it
    marked = turn_nll(model, hub_tok, [TALK])
    hub_tok.chat_template = hub_template("smollm2")   # the same text, without the markers
    assert turn_nll(model, hub_tok, [TALK]) == pytest.approx(marked)
    hub_tok.chat_template = ("{% for m in messages | reverse %}{{ m['role'] + ': ' + m['content'] + '\\n' }}"
                             "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
    with pytest.raises(ValueError, match="TRL knows no training version"):
        turn_nll(model, hub_tok, [TALK])


def test_sft_calibration_on_a_template_trl_cannot_patch(toy_model_dir, hub_tok, tmp_path):
    """SmolLM2's own ChatML has no markers and TRL no training version of it: calibrate_sft trains on the tokens and
    the assistant mask of assistant_tokens, and lowers the human-turn NLL as on the marked template."""
    import shutil

    src = tmp_path / "unmarked"
    shutil.copytree(toy_model_dir, src)
    hub_tok.chat_template = hub_template("smollm2")
    hub_tok.save_pretrained(src)
    model, tok = load_model(str(src), device="cpu")
    held_out = shifted(60, 1)
    before = turn_nll(model, tok, held_out)
    sim = calibrate_sft(src, shifted(120, 0), tmp_path / "sim", epochs=2, lr=3e-3, seed=0)
    model2, tok2 = load_model(str(sim), device="cpu")
    assert tok2.chat_template == hub_template("smollm2")   # the user's template, not a patched one
    assert turn_nll(model2, tok2, held_out) < 0.5 * before
