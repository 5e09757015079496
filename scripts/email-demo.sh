#!/usr/bin/env bash
# E-mail demo: build a store from the SpamAssassin corpus (easy-ham / hard-ham / spam), train the
# e-mail preset (configs/email-fast.yaml: 32 tokens and a bag of 1,024 word n-grams, the store's defaults)
# for at most 8 minutes, export a bundle, classify a few messages, and print
# the TF-IDF + logistic-regression baseline on the same split beside the TRM's numbers.
# The corpus is read from ../shared/data (or SA=/path/to/spamassassin).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TRMKIT=.venv/bin/trmkit
SA=${SA:-../shared/data/email/spamassassin}
DATA=data/email-sa3-fast
if [ ! -d "$SA" ]; then
  echo "no SpamAssassin corpus at $SA: set SA=/path/to/spamassassin (folders easy-ham-1, hard-ham-1, spam-1, ...)" >&2
  exit 2
fi
if [ ! -f "$DATA/train/meta.json" ]; then
  $TRMKIT data email --source "$SA" --label-map configs/email-sa3.yaml --out "$DATA"
fi
RUN=runs/email-demo-$(date +%Y%m%d-%H%M%S)
$TRMKIT train configs/email-fast.yaml run.dir="$RUN" data.path="$DATA"
$TRMKIT email export "$RUN" --out "$RUN/bundle"
echo "== one spam, one hard-ham and one easy-ham message, classified by the bundle =="
$TRMKIT email predict "$RUN/bundle" "$SA/spam-2/$(ls "$SA/spam-2" | head -1)" \
  "$SA/hard-ham-1/$(ls "$SA/hard-ham-1" | tail -1)" "$SA/easy-ham-2/$(ls "$SA/easy-ham-2" | tail -1)"
echo "== the same test split: TF-IDF + logistic regression beside the TRM =="
$TRMKIT email baseline "$DATA" --run "$RUN" >/dev/null
$TRMKIT report "$RUN" >/dev/null && echo "plots (confusion, reliability) and summary: $RUN/report/report.md"
