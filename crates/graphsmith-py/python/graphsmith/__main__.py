"""``python -m graphsmith ...`` runs the graphsmith command."""

from graphsmith._cli import main

main()
