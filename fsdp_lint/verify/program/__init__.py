"""``fsdp-lint verify --program train.py``: confirm each finding in the user's own job.

- ``options``: the command line (``--program``/``-m``, torchrun options, ``-- args``).
- ``sites``: the user's call site (first frame outside torch and fsdp-lint).
- ``signatures``: PyTorch exception texts that identify a rule's hazard.
- ``observe``: the runtime layer installed in each rank before the user's code.
- ``evidence``: from every rank's events to hazards per rule and site.
- ``windows``: per rule, what must have run at a site before it may be RAN CLEAN.
- ``join``: findings against hazards: CONFIRMED / RAN CLEAN / NOT REACHED / ERROR / MISSED.
- ``report``: text, JSON and SARIF.
- ``command``: static check, launch under torchrun, join, report, exit status.
- ``table``: every scenario's flagged and fixed program as a user program (docs table).
"""
