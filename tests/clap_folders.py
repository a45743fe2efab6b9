"""A tiny transformers ClapModel folder (config, safetensors weights, tokenizer, feature extractor), as
laion/clap-htsat-* are saved: what the hf-clap tests import and break."""

import torch
import transformers

AUDIO_CFG = {"spec_size": 64, "num_mel_bins": 16, "patch_size": 4, "patch_stride": 4, "window_size": 4,
             "depths": [1, 1, 1], "num_attention_heads": [1, 2, 2], "patch_embeds_hidden_size": 8,
             "hidden_size": 32}
TEXT_CFG = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
            "max_position_embeddings": 40, "pad_token_id": 1, "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0}
#: One-second windows keep the tiny model's input (101 frames) below its 256-frame image.
FEATURES = {"feature_size": 16, "max_length_s": 1, "frequency_min": 50, "frequency_max": 14_000}


def _tokenizer():
    vocab = {s: i for i, s in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])}
    for c in [chr(c) for c in range(33, 127)] + ["Ġ", "é", "è", "à", "ç"]:
        vocab.setdefault(c, len(vocab))
    return transformers.RobertaTokenizer(vocab=vocab, merges=[])


def clap_folder(root, fusion: bool, seed: int = 0):
    """A tiny ClapModel + tokenizer + feature extractor saved as laion/clap-htsat-* are."""
    torch.manual_seed(seed)
    tok = _tokenizer()
    audio = {**AUDIO_CFG, "enable_fusion": fusion, **({"fusion_type": "aff_2d"} if fusion else {})}
    model = transformers.ClapModel(transformers.ClapConfig(text_config={**TEXT_CFG, "vocab_size": len(tok)},
                                                           audio_config=audio, projection_dim=12,
                                                           logit_scale_init_value=1 / 0.05)).eval()
    fe = transformers.ClapFeatureExtractor(**FEATURES, truncation="fusion" if fusion else "rand_trunc")
    model.save_pretrained(root)
    tok.save_pretrained(root)
    fe.save_pretrained(root)
    return model, tok, fe
