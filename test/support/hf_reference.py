"""Reference renderings for the model-adapter tests: transformers' apply_chat_template over a model
folder. Reads {"cases": [...]} from the JSON file named by argv[1], writes {"results": [...]} on stdout; one process
for every case, each folder's tokenizer loaded once. The messages come as the template sees them
(Stepwise's templateContext), so both sides render the same context."""
import json
import sys

from transformers import AutoTokenizer


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        request = json.load(f)
    tokenizers = {}
    results = []
    for case in request["cases"]:
        tok = tokenizers.get(case["dir"])
        if tok is None:
            tok = tokenizers[case["dir"]] = AutoTokenizer.from_pretrained(case["dir"], local_files_only=True)
        kwargs = case.get("kwargs") or {}
        args = dict(
            conversation=case["messages"],
            tools=case.get("tools"),
            add_generation_prompt=case.get("add_generation_prompt", False),
            **kwargs,
        )
        try:
            text = tok.apply_chat_template(**args, tokenize=False)
            ids = tok.apply_chat_template(**args, tokenize=True, return_dict=False)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            results.append({"text": text, "ids": list(ids)})
        except Exception as err:  # noqa: BLE001 - reported to the test, which fails on it
            results.append({"error": f"{type(err).__name__}: {err}"})
    json.dump({"results": results}, sys.stdout)


main()
