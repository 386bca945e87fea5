"""Calibrate: measure this machine, fit the cost model's parameters, write a Profile; validate it.

    measure (bench comm + bench train, one launch per fabric)  ->  raw JSONL in a records folder
    fit (pure functions: records in, parameters out)            ->  Profile (JSON, sources per value)
    validate: other cases, predicted vs measured                ->  a row per case, summary, scatter PNG

- cases.py: the training cases and the plans of calibration and validation (GPU and CPU).
- machine.py: the machine measured, as a Topology.
- launch.py: one launch per fabric, the records folder.
- rank.py: what each rank runs (the real bench comm and bench train code; the only module with torch).
- fit.py: alpha-beta per link and op, host seconds, GPU rates, memory; what each is fitted from.
- driver.py: `calibrate(...)`: measure or read records, fit, write the profile and its cache copy.
- validate.py: compare, summarize, the accuracy target, the scatter plot.

Which profile applies to a machine (fingerprint, cache) is the cost model's: costmodel/profile_store.py.
"""
