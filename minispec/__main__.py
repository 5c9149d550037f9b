"""python -m minispec "def fib(n):" [--drafter NAME]: the demo (minispec.kit.demo)."""
from .kit.demo import main

if __name__ == "__main__":
    main()
