"""What every page of the apps shares, the engine's and the domain apps' (through
``scheduling.api``): times in admin fields, lists that answer any query string, selections
of ids, and the Content-Security-Policy."""
