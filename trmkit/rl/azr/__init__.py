"""Code-reasoning tasks in the Absolute Zero Reasoner's formats (Zhao et al., 2025): seed files,
prompts and answers for deduction, abduction and induction, the wider sandbox policy their
programs need, and the validation of programs a proposer writes."""
