"""What an app owner picks from: agent versions, tools, models, deployments."""
