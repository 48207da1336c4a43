"""Apps (the draft), their versions, restore."""
