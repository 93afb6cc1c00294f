"""Records allocation traces of real PyTorch models with PyTorch's memory
history, for bench/trace_replay.

Each model runs a few steps on the GPU from an empty caching allocator while
torch.cuda.memory._record_memory_history is on. The trace keeps only what an
allocator sees: allocations (with PyTorch's block size) and frees, in order.
File format, one event a line:
    # model=NAME steps=N torch_peak_reserved=BYTES torch_peak_allocated=BYTES
    a ID BYTES      (allocation number ID)
    f ID            (free of allocation ID)
Usage: python3 record_traces.py OUTDIR [model ...]
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


MODELS = {"resnet50_train": resnet50_train, "gpt2_train": gpt2_train, "vit_b16_infer": vit_b16_infer}


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
    for name in names:
        try:
            record(name, out_dir)
        except Exception as exc:  # a model whose package is missing is skipped, visibly
            print(f"{name}: skipped ({type(exc).__name__}: {exc})")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
