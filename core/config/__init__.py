"""Configuration: recipe, cluster, model catalog, YAML loading, paths, errors, secrets.

Files in, validated models out. No I/O beyond reading those files; pure (never imports remote/,
launch/, run/, measure/ or cli/)."""
