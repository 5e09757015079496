"""The trainer: one session of a run from its config to its summary. The rooms:

    run.py         `run`: the one way into training (claim the run directory, prepare, the loop)
    hooks.py       Hooks: what a caller adds to the loop (start, each step, stop, its own evaluation)
    session.py     Session (with Data and Runtime), Clock; `prepare` builds a session from one Config
    loop.py        `train`: steps, periodic evaluation, checkpoints on a clock, early stop
    step.py        one training step (the ACT carry, micro-batches, optimizers)
    evaluate.py    evaluation metrics, the Scorer protocols, `run_eval` with the EMA weights
    resume.py      a run's config on --resume, exact resume, saving state, restoring the best
    finish.py      the run's weights, summary.json, per-phase memory against the plan
    state.py       the full training state as flat tensors + JSON
    checkpoint/    crash-safe checkpoint directories (streaming safetensors, rotation, verify)
    objective.py   the Objective protocol: a workload that makes its own batches
    optim.py       AdamAtan2, sign-SGD for puzzle embeddings, the lr schedule, EMA
    guard.py       the memory guard: resize micro-batches to stay under the budget
    distributed.py several processes: ranks, agreement, shared plan, gathered state
    signals.py     a stop signal finishes the step and saves

The trainer never imports a task or an application: a task plugs in through a store and a
Scorer, an application through an Objective.
"""
