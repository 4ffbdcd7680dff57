"""What a cell computes, apart from how it is parallelised: the model (model: what xbench asks of
one; models and layers: xbench's own specs; model_file and file_checks: a user's model file;
resolve: a name into a model), the data (data: what a cell trains on; mnist, cifar10 and
shakespeare: the datasets; samples: which samples each rank trains on), image layouts, and the
knobs that change what is computed or sent (precision, gradient compression, the faults injected
on purpose).

May import: common's errors and machine.
"""
