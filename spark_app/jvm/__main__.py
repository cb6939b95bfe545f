import sys

from spark_app.jvm import main

sys.exit(main())
