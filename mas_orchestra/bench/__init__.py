"""Research tooling: grading, evaluations, MASBench and the data-row reader.

- :mod:`~mas_orchestra.bench.grading`: answer grading (math, exact/F1, multiple choice, LLM judge);
- :mod:`~mas_orchestra.bench.evaluation`: ``mas-orchestra eval`` / ``pareto`` (runner, resume, summary, plots);
- :mod:`~mas_orchestra.bench.masbench`: the synthetic MASBench problems (generate, verify);
- :mod:`~mas_orchestra.bench.datasets`: the one reader of ``{id, question, answer}`` JSONL rows.
"""
