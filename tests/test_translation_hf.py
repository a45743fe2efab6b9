"""The hf backend with tiny randomly initialised NLLB and Marian models saved to temporary folders: the
translations equal a greedy decoding written out here step by step (source code, forced target code /
target token, stop at </s>), and layouts, language codes and errors are recognised."""

import json

import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.languages import NLLB_CODES
from mlatr.translation import HFBackend, Translator
from mlatr.translation.hf_backend import marian_codes

transformers = pytest.importorskip("transformers")

CHARS = "abcdefghijklmnopqrstuvwxyzéñçà▁"
MAX_NEW = 6


def _tiny_seq2seq(config_cls, model_cls, vocab_size, pad, eos, special, **extra):
    """A random model that never emits a special token (</s>, language codes): every output is MAX_NEW
    characters long and depends on the input, so comparing two decodings means something."""
    torch.manual_seed(0)
    cfg = config_cls(vocab_size=vocab_size, d_model=16, encoder_layers=1, decoder_layers=1,
                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                     max_position_embeddings=64, pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=eos,
                     dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, init_std=0.5,
                     tie_word_embeddings=False, forced_eos_token_id=None, **extra)
    model = model_cls(cfg).eval()
    with torch.no_grad():
        if hasattr(model, "final_logits_bias"):  # Marian
            model.final_logits_bias[0, special] = -100.0
        else:  # M2M100: the decoder's final norm outputs zero-mean vectors + bias 0.3: a row of -20 scores -6 d
            model.model.decoder.layer_norm.bias.fill_(0.3)
            model.lm_head.weight[special] = -20.0
    return model


@pytest.fixture(scope="module")
def nllb_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nllb")
    vocab = {s: i for i, s in enumerate(["<s>", "<pad>", "</s>", "<unk>", *CHARS])}
    tok = transformers.NllbTokenizer(vocab=vocab, merges=[], additional_special_tokens=list(NLLB_CODES.values()))
    special = [0, 1, 2, 3, *tok.convert_tokens_to_ids(list(NLLB_CODES.values()))]
    model = _tiny_seq2seq(transformers.M2M100Config, transformers.M2M100ForConditionalGeneration, len(tok), 1, 2,
                          special, bos_token_id=0, scale_embedding=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def greedy(model, src_ids, start: list[int], eos: int) -> list[int]:
    """Greedy decoding by hand: the decoder starts from ``start`` and appends the argmax until </s>."""
    out = list(start)
    with torch.no_grad():
        enc = model.get_encoder()(input_ids=torch.tensor([src_ids])).last_hidden_state
        for _ in range(MAX_NEW - (len(start) - 1)):  # generate counts a forced first token as new
            logits = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([out])).logits[0, -1]
            out.append(int(logits.argmax()))
            if out[-1] == eos:
                break
    return out


def test_nllb_translation_equals_greedy_decoding(nllb_folder):
    backend = HFBackend(str(nllb_folder), num_beams=1, max_new_tokens=MAX_NEW, batch_size=2)
    assert backend.layout == "nllb" and backend.model == str(nllb_folder.resolve())
    texts = ["a dog barks", "rain falls on the roof", "birds"]
    got = Translator(backend).translate(texts, "eng", "spa")
    tok = transformers.AutoTokenizer.from_pretrained(str(nllb_folder))
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(nllb_folder)).eval()
    code = tok.convert_tokens_to_ids
    for text in texts:
        src = [code("eng_Latn"), *tok(text, add_special_tokens=False).input_ids, code("</s>")]
        ids = greedy(model, src, [code("</s>"), code("spa_Latn")], eos=code("</s>"))
        assert ids[1] == code("spa_Latn") and len(ids) == MAX_NEW + 1
        expected = tok.decode(ids[2:], skip_special_tokens=True).strip()
        assert got[text].translation == (" ".join(expected.split()) or None)
        assert got[text].translation  # never empty: no special token is ever generated (_tiny_seq2seq)
    assert len({o.translation for o in got.values()}) == len(texts)  # the output depends on the input
    # another target gives another forced code, so another output
    other = Translator(backend).translate(texts[:1], "eng", "cat")[texts[0]].translation
    assert other != got[texts[0]].translation


def test_nllb_pairs_and_codes(nllb_folder):
    backend = HFBackend(str(nllb_folder), num_beams=1, max_new_tokens=2)
    assert backend.code("zho") == "zho_Hans" and backend.code("fra") == "fra_Latn"
    backend.check_pair("eng", "jpn")
    backend.tokenizer = transformers.NllbTokenizer(vocab={"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4},
                                                   merges=[], additional_special_tokens=["eng_Latn"])
    with pytest.raises(MlatrError, match="no language token fra_Latn"):
        backend.check_pair("eng", "fra")


def test_marian_multi_target_prepends_the_target_token(tmp_path):
    sp, model_file = _char_spm(tmp_path)
    folder = tmp_path / "marian"
    folder.mkdir()
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, ">>spa<<": 3, ">>cat<<": 4}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes(model_file.read_bytes())
    tok = transformers.MarianTokenizer(*(str(folder / n) for n in ("source.spm", "target.spm", "vocab.json")))
    tok.save_pretrained(folder)
    model = _tiny_seq2seq(transformers.MarianConfig, transformers.MarianMTModel, len(vocab), 0, 1, [0, 1, 2, 3, 4])
    model.save_pretrained(folder)

    backend = HFBackend(str(folder), num_beams=1, max_new_tokens=MAX_NEW)
    assert backend.layout == "marian" and backend.marian_targets == {"spa": ">>spa<<", "cat": ">>cat<<"}
    with pytest.raises(MlatrError, match="no target token for fra"):
        backend.check_pair("eng", "fra")
    got = Translator(backend).translate(["a dog barks"], "eng", "cat")["a dog barks"].translation
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    src = tok(">>cat<< a dog barks").input_ids
    assert src[0] == vocab[">>cat<<"]
    expected = tok.decode(greedy(model.eval(), src, [1], eos=1), skip_special_tokens=True)
    assert got == " ".join(expected.split()) and got


def _char_spm(tmp_path, vocab_size=30):
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["a dog barks", "rain falls", "un perro ladra", "la pluja cau"] * 4), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=vocab_size,
                                   model_type="char", minloglevel=2)
    return spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model")), tmp_path / "sp.model"


def test_m2m100_uses_two_letter_codes(tmp_path):
    sp, model_file = _char_spm(tmp_path)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tok = transformers.M2M100Tokenizer(str(tmp_path / "vocab.json"), str(model_file), src_lang="fr")
    size = max(tok.lang_token_to_id.values()) + 1 + tok.num_madeup_words
    special = [0, 1, 2, 3, *range(len(vocab), size)]  # language tokens and made-up words after the pieces
    folder = tmp_path / "m2m100"
    model = _tiny_seq2seq(transformers.M2M100Config, transformers.M2M100ForConditionalGeneration, size, 1, 2,
                          special, bos_token_id=0, scale_embedding=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)  # its saved source language is French: the backend must set English

    backend = HFBackend(str(folder), num_beams=1, max_new_tokens=MAX_NEW)
    assert backend.layout == "m2m100" and backend.code("spa") == "es"
    backend.check_pair("eng", "spa")
    with pytest.raises(MlatrError, match="no m2m100 language code for 'ukr'|no language token"):
        backend.check_pair("eng", "ukr")
    got = Translator(backend).translate(["a dog barks", "rain falls"], "eng", "spa")
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    en, es = tok.get_lang_id("en"), tok.get_lang_id("es")
    for text, outcome in got.items():
        src = [en, *tok(text, add_special_tokens=False).input_ids, 2]
        ids = greedy(model, src, [2, es], eos=2)
        assert ids[1] == es
        expected = tok.decode(ids[2:], skip_special_tokens=True)  # the text after the forced language token
        assert outcome.translation == " ".join(expected.split()) and outcome.translation
        assert "__" not in outcome.translation  # no "__es__" in the text
    assert len({o.translation for o in got.values()}) == 2


def test_marian_codes_from_a_vocabulary():
    assert marian_codes({">>es<<": 1, ">>cat<<": 2, ">>fr_BE<<": 3, "hello": 4}) == {"spa": ">>es<<", "cat": ">>cat<<"}


def test_missing_or_wrong_folder(tmp_path):
    with pytest.raises(MlatrError, match="does not exist.*huggingface-cli download"):
        HFBackend(str(tmp_path / "nope"))
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(MlatrError, match="model_type 'bert'"):
        HFBackend(str(tmp_path / "bert"))
