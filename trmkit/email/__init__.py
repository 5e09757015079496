"""E-mail classification with a TRM, as an application on top of the toolkit (issue 12).

The data side (reading mailboxes, labels, de-duplication, splits, the tokenizer) lives in
`trmkit.data.email` and the store builder in `trmkit.tasks`; this package holds what uses a
trained model or compares against one: the scikit-learn TF-IDF + logistic-regression baseline
(`baseline.py`), whose numbers come from the same `tasks.classify.summary_metrics` as the
TRM's, and the prediction, export and serving tools. Heavy libraries (scikit-learn, tokenizers,
starlette) are imported inside the functions that need them.
"""
