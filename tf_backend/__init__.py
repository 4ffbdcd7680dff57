"""TensorFlow's backends, on Keras 3 models: the classes the traits table's rows of framework
tensorflow name (common/backends/traits/tensorflow.py and horovod.py; `xbench backends` lists
them).

Only launched workers (and `xbench models`) import these modules' TensorFlow code; the runner
imports just the backend classes. TensorFlow's C++ INFO and WARNING lines (CPU feature banners,
tf.data optimisation notes) would bury a cell's log, so they are dropped before TensorFlow loads;
errors still print, and a user's own TF_CPP_MIN_LOG_LEVEL wins.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
