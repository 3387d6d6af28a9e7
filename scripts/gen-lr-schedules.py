#!/usr/bin/python3
"""PyTorch's learning rates step by step, for cpudl's --lr-schedule (tests/train/lr_schedule_test.cpp).

  /usr/bin/python3 scripts/gen-lr-schedules.py     (Debian python3-torch)

Writes tests/golden/lr_schedules.json: for each schedule, the lr of every optimiser step of a run
of 7 epochs x 5 steps with base (or max) lr 0.1, read from the optimiser before each step as a
training loop sees it: OneCycleLR and CosineAnnealingLR stepped per step, StepLR per epoch.
"""
import json
import os

import torch

EPOCHS, STEPS, LR = 7, 5, 0.1
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "lr_schedules.json")


def run(make, per_epoch=False):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=LR)
    sched = make(opt)
    lrs = []
    for _ in range(EPOCHS):
        for _ in range(STEPS):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            if not per_epoch:
                sched.step()
        if per_epoch:
            sched.step()
    return lrs


def main():
    total = EPOCHS * STEPS
    golden = {
        "epochs": EPOCHS, "steps_per_epoch": STEPS, "lr": LR,
        "onecycle": run(lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=LR, total_steps=total,
                                                                      cycle_momentum=False)),
        "cosine": run(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=total)),
        "step_size_2": run(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.1), per_epoch=True),
    }
    with open(OUT, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
