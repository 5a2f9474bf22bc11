"""What every command line shares, the engine's and the domain apps'
(through ``scheduling.api``): one-line refusals, option parsers, and history exports."""
