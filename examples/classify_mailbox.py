"""Classify a mailbox from Python with a bundle (`trmkit email export`) or an e-mail run.

    python examples/classify_mailbox.py MODEL MAILBOX [THRESHOLD]

MAILBOX: an .eml file or folder, a Maildir, an mbox(.gz), a CSV or a JSONL. Prints how many
messages each label got and the five least certain messages.
"""

import sys
from collections import Counter

import trmkit

model, mailbox = sys.argv[1], sys.argv[2]
threshold = float(sys.argv[3]) if len(sys.argv) > 3 else None

predictions = trmkit.classify_mail(model, mailbox, threshold=threshold)
print(dict(Counter(p["label"] for p in predictions)))
for p in sorted(predictions, key=lambda p: p["probability"])[:5]:
    print(f"{p['probability']:.2f} {p['label']:<10} {p['source']}")
