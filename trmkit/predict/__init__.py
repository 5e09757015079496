"""`trmkit predict RUN INPUTS`: a trained run answers new inputs, in the inputs' own form.

Sudoku runs read 81-character lines (or 9 x 9 JSON grids) and write each answer in its puzzle's form
with whether the rules accept it; maze runs read text mazes (or JSON lists of rows) and write each maze
with its route marked 'o' and whether the route is valid, thinking with `--steps auto` by default;
pairs runs read JSONL, one {"input": ...} per line, and write one JSON answer per line (an "output" key
given with the input is scored). The model is loaded once per command, and once per `trmkit.Run`.

Rooms: engine.py (the run's model and the supervision steps it runs), forms.py (each task's inputs and
answers: tasks/sudoku/text.py, tasks/maze/text.py, tasks/pairs/codec.py), command.py (the command: its
checks of the inputs and of --out, the answers written, the summary), arguments.py (its options).
Nothing is imported here: the CLI builds every command's options without importing torch.
"""
