"""Writes tokenizer/ beside this file: the local tokenizer guidellm is given
(`--tokenizer kind=huggingface_auto,model=<dir>`), so that it never fetches one
from the Hugging Face Hub.

guidellm's synthetic data encodes Faker text with the tokenizer, cuts it to
`prompt_tokens` tokens and decodes it again; any text must therefore round
trip. A byte-level BPE without merges does: every byte is one token (256 of
them), no byte is unknown. The simulator counts whitespace-separated words, not
these tokens: guidellm's report takes the server's `usage` counts anyway.

Re-run with the clients' venv (`hack/tools/py-clients.sh` prints it):
    "$(hack/tools/py-clients.sh | tail -n1)/bin/python" crates/vllm-sim/tests/clients/make_tokenizer.py
"""

import json
import pathlib

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

out = pathlib.Path(__file__).resolve().parent / "tokenizer"
alphabet = pre_tokenizers.ByteLevel.alphabet()
vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
eos = "<|endoftext|>"
vocab[eos] = len(vocab)
tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
tok.decoder = decoders.ByteLevel()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, model_max_length=4096)
fast.save_pretrained(out)
# Keep only what from_pretrained needs: tokenizer.json and tokenizer_config.json.
for extra in ("special_tokens_map.json", "chat_template.jinja"):
    (out / extra).unlink(missing_ok=True)
text = "Simulated words, punctuation; and spaces. Éè"
assert fast.decode(fast.encode(text)) == text
print(json.dumps({"dir": str(out), "files": sorted(p.name for p in out.iterdir())}))
