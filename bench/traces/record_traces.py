"""Records allocation traces of real PyTorch models with PyTorch's memory
history, for bench/trace_replay.

Each model runs a few steps on the GPU from an empty caching allocator while
torch.cuda.memory._record_memory_history is on (llama_decode: one step, a
whole generation, whose 256 forwards already make most of the trace). The trace keeps only what an
allocator sees: allocations (with PyTorch's block size) and frees, in order.
File format, one event a line:
    # model=NAME steps=N torch_peak_reserved=BYTES torch_peak_allocated=BYTES
    a ID BYTES      (allocation number ID)
    f ID            (free of allocation ID)
Usage: python3 record_traces.py OUTDIR [model ...]
A model named on the command line that is skipped (its package or class is
missing, or it failed) makes the exit status 1.
"""
import os
import sys

import torch


def resnet50_train(steps):
    import torchvision

    model = torchvision.models.resnet50(weights=None).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()


def gpt2_train(steps):
    import transformers

    cfg = transformers.GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=512, vocab_size=50257)
    model = transformers.GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (8, 512), device="cuda")
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()


def vit_b16_infer(steps):
    import torchvision

    model = torchvision.models.vit_b_16(weights=None).cuda().eval()
    x = torch.randn(64, 3, 224, 224, device="cuda")
    with torch.no_grad():
        for _ in range(steps):
            model(x)


LLAMA_BATCH, LLAMA_PROMPT, LLAMA_NEW_TOKENS = 8, 128, 256


def new_decode_cache(transformers):
    """An empty DynamicCache, or None where this transformers has none (or
    cannot make one without arguments): the model then makes its own cache
    on the first forward, and it is handed back the same way."""
    cache_class = getattr(transformers, "DynamicCache", None)
    if cache_class is None:
        return None
    try:
        return cache_class()
    except Exception:  # a constructor that wants arguments
        return None


def llama_decode(steps):
    """Greedy decoding with a growing KV cache, the pattern of a serving
    step: a Llama of random weights in bfloat16, a batch of LLAMA_BATCH
    prompts of LLAMA_PROMPT tokens, then LLAMA_NEW_TOKENS tokens, one
    forward each (the first over the prompt, then over the last token,
    every forward extending the cache). A step is one whole generation."""
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                   num_attention_heads=16, num_key_value_heads=16,
                                   max_position_embeddings=LLAMA_PROMPT + LLAMA_NEW_TOKENS)
    model = transformers.LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    prompt = torch.randint(0, cfg.vocab_size, (LLAMA_BATCH, LLAMA_PROMPT), device="cuda")
    with torch.no_grad():
        for _ in range(steps):
            cache, ids = new_decode_cache(transformers), prompt
            for _ in range(LLAMA_NEW_TOKENS):
                out = model(input_ids=ids, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                ids = out.logits[:, -1:, :].argmax(dim=-1)
                del out  # the logits go before the next forward, as in generate()
            del cache, ids


MODELS = {"resnet50_train": resnet50_train, "gpt2_train": gpt2_train, "vit_b16_infer": vit_b16_infer,
          "llama_decode": llama_decode}
# Steps per model where not 3.
STEPS = {"llama_decode": 1}


def record(name, out_dir, steps=3):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=2_000_000)
    MODELS[name](steps)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak_reserved = torch.cuda.max_memory_reserved()
    peak_allocated = torch.cuda.max_memory_allocated()
    device = torch.cuda.current_device()
    events = snapshot["device_traces"][device]
    ids, lines, next_id = {}, [], 0
    frees = "free_completed" if any(e["action"] == "free_completed" for e in events) else "free_requested"
    for e in events:
        if e["action"] == "alloc":
            ids[e["addr"]] = next_id
            lines.append(f"a {next_id} {e['size']}")
            next_id += 1
        elif e["action"] == "free_requested" or e["action"] == "free_completed":
            if e["action"] == frees and e["addr"] in ids:
                lines.append(f"f {ids.pop(e['addr'])}")
    path = os.path.join(out_dir, f"{name}.trace")
    with open(path, "w") as f:
        f.write(f"# model={name} steps={steps} torch_peak_reserved={peak_reserved} torch_peak_allocated={peak_allocated}\n")
        f.write("\n".join(lines) + "\n")
    print(f"{name}: {next_id} allocations, torch peak reserved {peak_reserved / 2**20:.1f} MiB, "
          f"peak allocated {peak_allocated / 2**20:.1f} MiB -> {path}")


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    names = sys.argv[2:] or list(MODELS)
    skipped = []
    for name in names:
        try:
            record(name, out_dir, STEPS.get(name, 3))
        except Exception as exc:  # a model whose package is missing is skipped, visibly
            print(f"{name}: skipped ({type(exc).__name__}: {exc})")
            skipped.append(name)
        torch.cuda.empty_cache()
    if skipped and sys.argv[2:]:
        sys.exit(1)


if __name__ == "__main__":
    main()
