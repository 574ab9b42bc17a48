"""atomdeck core."""
