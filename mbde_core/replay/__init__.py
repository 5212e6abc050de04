"""Offline evaluation of estimators on ROS 2 bags (`mbde replay`), without ROS.

- :mod:`.pipeline`: bags x estimators as tasks of :mod:`mbde_core.runs`, one output folder per bag;
- :mod:`.source` (model + streamed readings and truth), :mod:`.decode` (batched CDR decoding);
- :mod:`.worker`: one estimator over one bag, streamed (bounded memory);
- :mod:`.encode` (estimates -> CDR in batches, part files), :mod:`.outputs` (metrics.json,
  estimates bag, report), :mod:`.plots`;
- :mod:`.inputs` / :mod:`.runner`: the same in memory for short bags (tests, live-node
  comparisons, the batch smoother, ``mbde render``).
"""
