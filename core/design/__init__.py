"""The design of a deployment: inventory parsing, plan, lint, commands (argv), export, the editable
design and the workspace that holds them.

Pure functions of models: no node I/O, no asyncio (never imports remote/, launch/, run/, measure/
or cli/)."""
