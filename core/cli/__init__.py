"""The headless verbs (`atomdeck plan|lint|nodes|up|status|logs|down|runs`, --json everywhere) and
the console's watcher process entry point. Uses run/, measure/ and the pure packages."""
