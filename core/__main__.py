"""``python -m core``: the same as the ``core`` console script."""
from core.main import main

main()
