"""The one proof room: a model built once, run on the same inputs two ways (eager and a
swap, or the original code and its port), every quantity compared with one tolerance table;
and the one choice of the attention stages 03 and 04 run."""
