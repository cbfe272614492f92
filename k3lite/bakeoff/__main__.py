import sys

from k3lite.bakeoff.cli import main

if __name__ == "__main__":   # worker processes (spawn) import this module again under another name
    sys.exit(main())
