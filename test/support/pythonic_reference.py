"""Expected results for test/fixtures/models/pythonic-edge-cases.json: the steps of vLLM's `pythonic`
tool parser (vllm/tool_parsers/pythonic_tool_parser.py@0047fb9d, extract_tool_calls) run by Python
itself: the parser's shape pattern, then Python's `ast`, literal keyword values, and
json.dumps(ensure_ascii=False). Reads a JSON list of texts on stdin, writes the cases on stdout."""
import ast
import json
import re
import sys

# The parser's TOOL_CALL_REGEX, as data.
SHAPE = re.compile(
    r"\[([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s)?\),\s*)*([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s*)?\)\s*)+\]",
    re.DOTALL,
)


def literal(node):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
        return {k.value: literal(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.List):
        return [literal(v) for v in node.elts]
    raise ValueError("not a literal")


def parse(text):
    as_text = {"content": text or None, "tool_calls": []}
    if SHAPE.match(text) is None:
        return as_text
    try:
        body = ast.parse(text).body
        value = getattr(body[0], "value", None)
        if not isinstance(value, ast.List) or not all(isinstance(e, ast.Call) for e in value.elts):
            return as_text
        calls = []
        for call in value.elts:
            if not isinstance(call.func, ast.Name):
                return as_text
            args = {kw.arg: literal(kw.value) for kw in call.keywords}
            calls.append({"name": call.func.id, "arguments": json.dumps(args, ensure_ascii=False)})
        return {"content": None, "tool_calls": calls}
    except Exception:  # noqa: BLE001 - any failure leaves the text as content, as in vLLM
        return as_text


texts = json.load(sys.stdin)
json.dump([{"text": t, "expected": parse(t)} for t in texts], sys.stdout, indent=2, ensure_ascii=False)
