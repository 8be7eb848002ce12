"""pase: parallelization strategies for efficient DNN training."""
from pase.errors import PaseError
from pase.problem import Problem, Solution, Status

__version__ = "0.1.0"
__all__ = ["PaseError", "Problem", "Solution", "Status", "__version__"]
