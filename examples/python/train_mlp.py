#!/usr/bin/python3
"""Train the built-in multilayer perceptron from NumPy arrays, evaluate it, save a checkpoint.

    PYTHONPATH=build/python python3 examples/python/train_mlp.py [--device cpu|vulkan|auto]
        [--steps 600] [--out mlp.safetensors]

The data are NumPy arrays (the built-in synthetic classification set: 16 features, 10 classes);
batches are drawn with NumPy and fed step by step. The checkpoint loads in the CLI:
`meganeura infer --model mlp --checkpoint mlp.safetensors`. Ctrl-C stops training after the
step in flight; the checkpoint is still written.
"""
import argparse
import time

import numpy as np

import meganeura as mn

BATCH = 64


def mlp_loss(g):
    """x [64, 16] -> logits [64, 10]; mean cross-entropy against int32 labels."""
    x = g.input("x", (BATCH, 16))
    labels = g.input("labels", (BATCH,), dtype="i32")
    return mn.cross_entropy(mn.models.mlp(g, x, hidden=128, layers=2), labels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu | vulkan | auto")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="mlp.safetensors")
    a = ap.parse_args()

    x_train, y_train = mn.models.synthetic_classification(4096, 0)
    x_test, y_test = mn.models.synthetic_classification(2048, 1)

    g = mn.Graph()
    loss = mlp_loss(g)
    opt = mn.Optimizer("adamw", lr=3e-3, weight_decay=1e-4, warmup_steps=min(30, a.steps // 2), total_steps=a.steps,
                       min_lr=1e-4)
    trainer = mn.Trainer(g, loss, opt, device=a.device, seed=a.seed)
    print(f"training on {trainer.session.device_name} {trainer.session.device_note}".rstrip())

    rng = np.random.default_rng(a.seed)
    order = []

    def feed(step):  # a fresh permutation each epoch
        if not order or step % (len(x_train) // BATCH) == 0:
            order[:] = [rng.permutation(len(x_train))]
        k = step % (len(x_train) // BATCH)
        idx = order[0][k * BATCH:(k + 1) * BATCH]
        return {"x": x_train[idx], "labels": y_train[idx]}

    def report(step, value):
        if (step + 1) % 100 == 0:
            print(f"step {step + 1:5d}  loss {value:.4f}")

    start = time.perf_counter()
    try:
        trainer.train(a.steps, feed=feed, callback=report)
    except KeyboardInterrupt:
        print(f"interrupted after {trainer.steps} steps")
    seconds = time.perf_counter() - start
    print(f"{trainer.steps} steps in {seconds:.2f} s ({trainer.steps / seconds:.0f} steps/s)")

    # Inference in the same session: a second program reads the trained parameters by name.
    e = mn.Graph()
    e.output("test_logits", mn.models.mlp(e, e.input("test_x", (len(x_test), 16)), hidden=128, layers=2))
    program = trainer.session.add(e)
    logits = trainer.session.run({"test_x": x_test}, program=program)["test_logits"]
    print(f"test accuracy {(logits.argmax(1) == y_test).mean():.4f} on {len(x_test)} examples")

    # The model's hash (its graph with the loss as output "loss") tells `meganeura infer` which
    # model the checkpoint holds.
    model = mn.Graph()
    model.output("loss", mlp_loss(model))
    trainer.session.save_checkpoint(a.out, {"graph_hash": str(model.hash()), "model": "mlp"})
    print(f"checkpoint written to {a.out}")


if __name__ == "__main__":
    main()
