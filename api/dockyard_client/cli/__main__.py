from dockyard_client.cli.app import main

main()
