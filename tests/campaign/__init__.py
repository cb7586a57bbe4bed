"""The randomized fault campaign: each seed chooses at random how a cluster of workers is started, how
schedules of several kinds arrive, and which faults strike while they fire; an independent checker then
derives every due instant from each definition and reads the committed fires.

    python -m tests.campaign --seeds 20 --duration 180      (make campaign)
    python -m tests.campaign --seed 1234 --duration 180     (replay one seed: it prints what it chose)

plan.py chooses, expect.py knows the definitions and their instants, run.py runs a seed and checks it.
"""
