"""Everything e-mail: reading real mail, labels, the classifier task, and what uses a trained model.

    mail/        real mail -> Message records (mime.py: one RFC 822 message; mailbox.py: .eml
                 folders, Maildir, mbox(.gz); records.py: CSV and JSONL)
    labels.py    --label-from strategies (folder, gmail, header:NAME, column:NAME) and label maps
    dedup.py     exact and near-duplicate removal (MinHash + LSH, verified by Jaccard)
    prepare.py   language, stratified or time split, lengths, the dataset report
    tokenizer.py the `tokenizers` BPE trained on the training split; field markers; truncation
    task.py      `trmkit data email` (mailbox -> classify store) and the e-mail `Task`
    plots.py     the task's report plots: confusion matrix, reliability diagram, Markdown section
    bundle.py    a trained classifier as one folder: export, load, predict
    serve.py     `trmkit email serve`, a local HTTP JSON API
    baseline.py  the TF-IDF + logistic-regression baseline a TRM has to beat
    commands.py  `trmkit email predict | export | serve | baseline`

The generic classification maths (F1, calibration, the scorer) is tasks/classify/ (metrics.py, scorer.py), shared by
the scorer, the plots and the baseline. Heavy libraries (scikit-learn, tokenizers, starlette,
matplotlib) are imported inside the functions that need them.
"""
