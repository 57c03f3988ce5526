"""Mistral's reference encoder for the model-adapter tests: mistral-common (Mistral's official tokenizer
and chat encoder), with its bundled SentencePiece tokenizers: v3 (Mistral-7B-Instruct-v0.3's) and
v7 (Mistral Large 2411's).

  mistral_reference.py folder DIR VERSION   writes DIR/tokenizer.json (the bundled model converted
                                            by transformers' LlamaConverter) and DIR/tokenizer_config.json
  mistral_reference.py encode FILE VERSION  reads {"cases": [{messages, tools}]}, writes
                                            {"results": [{ids, text}]}
"""
import json
import os
import sys
import types

try:
    import pydantic_extra_types.language_code  # noqa: F401
except ImportError:
    # mistral-common imports it for transcription requests only; the offline index lacks it.
    pkg = types.ModuleType("pydantic_extra_types")
    mod = types.ModuleType("pydantic_extra_types.language_code")
    mod.LanguageAlpha2 = str
    pkg.language_code = mod
    sys.modules["pydantic_extra_types"] = pkg
    sys.modules["pydantic_extra_types.language_code"] = mod

import mistral_common  # noqa: E402
from mistral_common.protocol.instruct.request import ChatCompletionRequest  # noqa: E402
from mistral_common.protocol.instruct.validator import ValidationMode  # noqa: E402
from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy  # noqa: E402
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer  # noqa: E402

DATA = os.path.join(os.path.dirname(mistral_common.__file__), "data")
MODELS = {
    "v3": os.path.join(DATA, "mistral_instruct_tokenizer_240323.model.v3"),
    "v7": os.path.join(DATA, "mistral_instruct_tokenizer_241114.model.v7"),
}


def write_folder(out_dir, model):
    from transformers.convert_slow_tokenizer import LlamaConverter, SentencePieceExtractor
    from transformers.tokenization_utils_base import generate_merges

    class Extractor(SentencePieceExtractor):
        # transformers 5's extractor takes a model class here; the converter passes the scores.
        def extract(self, vocab_scores=None):
            vocab = {p.piece: i for i, p in enumerate(self.proto.pieces)}
            return vocab, generate_merges(vocab, vocab_scores)

    class Converter(LlamaConverter):
        SpmExtractor = Extractor

    class Spm:
        # legacy: "▁" is prepended to every run of text between control tokens, as SentencePiece
        # does to each piece mistral-common encodes.
        vocab_file = model
        legacy = True
        add_prefix_space = True

        def convert_ids_to_tokens(self, i):
            return ["<unk>", "<s>", "</s>"][i]

    Converter(Spm()).converted().save(os.path.join(out_dir, "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": False,
              "add_eos_token": False, "tokenizer_class": "LlamaTokenizer", "model_max_length": 32768}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def encode(path, model):
    with open(path, encoding="utf-8") as f:
        request = json.load(f)
    # Serving mode refuses a conversation that ends with the assistant; finetuning mode (training
    # data, what a trainer renders) takes it and encodes the same way.
    tokenizers = {mode: MistralTokenizer.from_file(model, mode=mode) for mode in ValidationMode}
    results = []
    for case in request["cases"]:
        ends_with_assistant = case["messages"][-1]["role"] == "assistant"
        tokenizer = tokenizers[ValidationMode.finetuning if ends_with_assistant else ValidationMode.test]
        try:
            req = ChatCompletionRequest(messages=case["messages"], tools=case.get("tools"))
            tokens = tokenizer.encode_chat_completion(req).tokens
            text = tokenizer.instruct_tokenizer.decode(tokens, special_token_policy=SpecialTokenPolicy.KEEP)
            results.append({"ids": tokens, "text": text})
        except Exception as err:  # noqa: BLE001 - reported to the test, which fails on it
            results.append({"error": f"{type(err).__name__}: {err}"})
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    command, path, version = sys.argv[1:4]
    (write_folder if command == "folder" else encode)(path, MODELS[version])
